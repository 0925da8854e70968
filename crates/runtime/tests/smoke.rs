use ember_runtime::{Stack, TcpListener, TcpStream};
use std::io::{Read, Write};

#[test]
fn loopback_echo() {
    let st = Stack::loopback(2).unwrap();
    let l = TcpListener::bind(&st, "127.0.0.1:7000").unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        s.is_fused().unwrap()
    });
    let mut c = TcpStream::connect(&st, "127.0.0.1:7000").unwrap();
    c.write_all(b"hello").unwrap();
    let mut buf = [0u8; 5];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    let fused = t.join().unwrap();
    eprintln!("fused={fused} stats={:?}", st.stats().tcp);
    assert!(fused);
}

/// A socket call from a probe subscriber (which runs inside the squeue) is refused with
/// `Deadlock` instead of waiting for the squeue it runs in.
#[test]
fn socket_call_from_a_probe_subscriber_is_refused_not_deadlocked() {
    use std::sync::{Arc, Mutex};
    let st = Stack::loopback(1).unwrap();
    let l = TcpListener::bind(&st, "127.0.0.1:7001").unwrap();
    let c = Arc::new(TcpStream::connect(&st, "127.0.0.1:7001").unwrap());
    let (s, _) = l.accept().unwrap();
    let seen: Arc<Mutex<Vec<std::io::ErrorKind>>> = Arc::default();
    let (c2, seen2) = (Arc::downgrade(&c), seen.clone());
    st.subscribe(move |_ev| {
        if let Some(c) = c2.upgrade() {
            if let Err(e) = c.set_nodelay(true) {
                seen2.lock().unwrap().push(e.kind());
            }
        }
    });
    (&*c).write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    (&s).read_exact(&mut b).unwrap();
    let kinds = seen.lock().unwrap().clone();
    assert!(!kinds.is_empty());
    assert!(kinds.iter().all(|k| *k == std::io::ErrorKind::Deadlock));
    st.shutdown();
}
