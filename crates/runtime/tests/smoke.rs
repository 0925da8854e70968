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
