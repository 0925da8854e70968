//! Helpers shared by the runtime's integration tests.
#![allow(dead_code)]

/// SplitMix64: a small seeded generator (chunk sizes, payloads, random operations).
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// A length: mostly small, sometimes large (buffers fill, writes go partial).
    pub fn len(&mut self) -> usize {
        match self.next() % 4 {
            0 => self.range(1, 64),
            1 => self.range(1, 4096),
            2 => self.range(1, 40_000),
            _ => self.range(40_000, 300_000),
        }
    }
}

/// Helpers of the tests that put ember on a real link (TAP, AF_PACKET) against the kernel
/// inside a namespace.
pub mod kernel_peer {
    use ember_runtime::{Stack, TcpListener, TcpStream};
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::time::Duration;

    /// The bound on every blocking step.
    pub const T: Duration = Duration::from_secs(20);

    /// True (after saying why) when this process may not make namespaces and devices.
    pub fn skip() -> bool {
        match ember_runtime::dev::netns::privileged() {
            Ok(()) => false,
            Err(why) => {
                eprintln!("skipped: {why}");
                true
            }
        }
    }

    /// Whether the outside program `tool` (from Debian's `package`) is installed; when it is
    /// not, says that `what` is skipped and why. The tests run the parts that need no tool
    /// either way.
    pub fn have_tool(tool: &str, package: &str, what: &str) -> bool {
        match ember_runtime::dev::netns::need_tool(tool, package) {
            Ok(()) => true,
            Err(why) => {
                eprintln!("skipped {what}: {why}");
                false
            }
        }
    }

    /// Five ICMP echoes from the kernel side of `ns` to ember at `ember`, which must all
    /// be answered; with the ping tool, when it is installed (else says it skipped).
    pub fn kernel_pings(ns: &ember_runtime::dev::netns::NetNs, ember: &str) {
        if !have_tool("ping", "iputils-ping", "the ICMP echo check") {
            return;
        }
        let o = ember_runtime::dev::netns::NetNs::run(
            ns.command("ping")
                .args(["-c", "5", "-i", "0.01", "-W", "2", ember]),
            T,
        )
        .unwrap();
        assert!(
            o.status.success(),
            "ping: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// `n` bytes of a pattern that differs per `seed`.
    pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8)
            .collect()
    }

    /// The kernel connects to ember at `ember:port`, sends `n` bytes, ember echoes them
    /// back; both sides check.
    pub fn echo_round_trip(stack: &Stack, ember: Ipv4Addr, port: u16, n: usize) {
        let l = TcpListener::bind(stack, SocketAddrV4::new(ember, port)).unwrap();
        l.set_accept_timeout(Some(T)).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut buf = vec![0u8; 65536];
            let mut total = 0;
            loop {
                let k = (&s).read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                (&s).write_all(&buf[..k]).unwrap();
                total += k;
            }
            s.shutdown(std::net::Shutdown::Write).unwrap();
            total
        });
        let c = std::net::TcpStream::connect_timeout(&SocketAddrV4::new(ember, port).into(), T)
            .unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        let data = pattern(n, port as u8);
        let c2 = c.try_clone().unwrap();
        let d2 = data.clone();
        let writer = std::thread::spawn(move || {
            (&c2).write_all(&d2).unwrap();
            c2.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut back = Vec::with_capacity(n);
        (&c).read_to_end(&mut back).unwrap();
        writer.join().unwrap();
        assert_eq!(server.join().unwrap(), n);
        assert!(back == data, "echoed bytes differ");
    }

    /// ember connects to a kernel listener at `kernel:port` and sends `n` bytes; the
    /// kernel checks them.
    pub fn ember_sends(stack: &Stack, kernel: Ipv4Addr, port: u16, n: usize) {
        let kl = std::net::TcpListener::bind(SocketAddrV4::new(kernel, port)).unwrap();
        let srv = std::thread::spawn(move || {
            let (s, _) = kl.accept().unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut v = Vec::new();
            (&s).read_to_end(&mut v).unwrap();
            v
        });
        let c = TcpStream::connect_timeout(stack, SocketAddrV4::new(kernel, port), T).unwrap();
        let data = pattern(n, port as u8);
        (&c).write_all(&data).unwrap();
        drop(c);
        assert!(
            srv.join().unwrap() == data,
            "bytes received by the kernel differ"
        );
    }
}

/// An interface with a /24 and the default MAC and MTU.
pub fn iface(addr: std::net::Ipv4Addr) -> ember_runtime::IfaceConfig {
    ember_runtime::IfaceConfig {
        addr,
        prefix_len: 24,
        mac: None,
        mtu: None,
    }
}

/// Client 198.18.0.1 (one squeue) and server 198.18.0.2 (two squeues, `server` tunables)
/// on a clean in-memory link.
pub fn two_stacks(server: &[(&str, &str)]) -> (ember_runtime::Stack, ember_runtime::Stack) {
    use ember_runtime::dev::{mem_link, ImpairConfig};
    use std::net::Ipv4Addr;
    let (ea, eb) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 5);
    let a = ember_runtime::Stack::builder()
        .squeues(1)
        .interface(iface(Ipv4Addr::new(198, 18, 0, 1)), ea)
        .build()
        .unwrap();
    let mut b = ember_runtime::Stack::builder()
        .squeues(2)
        .interface(iface(Ipv4Addr::new(198, 18, 0, 2)), eb);
    for (k, v) in server {
        b = b.param(k, v).unwrap();
    }
    (a, b.build().unwrap())
}
