//! Packet capture: a device wrapper that writes every frame it carries, both directions,
//! to a pcap file (Ethernet link type, microsecond timestamps) that tshark, tcpdump and
//! Wireshark open. It wraps any [`Device`], the in-memory link as much as a real one.
//!
//! * Frames are recorded as they cross the wrapper: a transmitted frame when the stack
//!   hands it over, a received frame when the stack polls it. Timestamps are wall-clock
//!   and taken under the writer's lock, so records are in file order and never go back.
//! * Capture never affects traffic: a write error stops the capture (counted, reported by
//!   [`Capture::error`]), and the frame goes on regardless.
//! * Bounded: frames longer than the snap length are truncated (the record keeps the
//!   original length), and with `max_bytes` the capture stops once the file would pass it
//!   (further frames are counted as not captured), like `tcpdump -C` without rotation.
//! * Buffered: records go through a 64 KiB buffer, flushed by [`Capture::flush`] and when
//!   the wrapper is dropped.

use super::device::Device;
use ember_core::time::Instant;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How a capture is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureOptions {
    /// Bytes of each frame kept (the rest is cut; the record keeps the frame's length).
    pub snaplen: u32,
    /// Stop capturing once the file would grow past this many bytes (`None`: no limit).
    pub max_bytes: Option<u64>,
}

impl Default for CaptureOptions {
    /// tcpdump's defaults: 262,144-byte snap length, no size limit.
    fn default() -> Self {
        CaptureOptions {
            snaplen: 262_144,
            max_bytes: None,
        }
    }
}

/// What a capture has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Frames written to the file.
    pub captured: u64,
    /// Frames that crossed the device but were not written (limit reached or a write
    /// error stopped the capture).
    pub not_captured: u64,
    /// Bytes written to the file so far (headers included).
    pub bytes: u64,
}

/// The buffered file, shared by the pcap writer and [`Capture::flush`].
#[derive(Clone)]
struct Out(Arc<Mutex<BufWriter<Box<dyn Write + Send>>>>);

impl Out {
    fn lock(&self) -> std::sync::MutexGuard<'_, BufWriter<Box<dyn Write + Send>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Write for Out {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.lock().write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.lock().flush()
    }
}

struct Sink {
    w: Option<PcapWriter<Out>>,
    out: Out,
    error: Option<String>,
    bytes: u64,
}

/// A device whose frames, both ways, are also written to a pcap file.
pub struct Capture {
    inner: Arc<dyn Device>,
    shared: Arc<Shared>,
    /// The first capture of the file (made by `to_writer`, not `share`): the one that
    /// reports the shared counters, so an interface's queues do not count them N times.
    leader: bool,
}

/// The file and counters, shared by the captures of several queues of one interface.
struct Shared {
    sink: Mutex<Sink>,
    opts: CaptureOptions,
    captured: AtomicU64,
    not_captured: AtomicU64,
}

/// pcap's file header and record header sizes.
const FILE_HEADER: u64 = 24;
const RECORD_HEADER: u64 = 16;

impl Capture {
    /// Wraps `inner`, writing to a new file at `path` (truncated if it exists).
    pub fn to_file(
        inner: Arc<dyn Device>,
        path: impl AsRef<Path>,
        opts: CaptureOptions,
    ) -> io::Result<Capture> {
        let f = std::fs::File::create(path)?;
        Capture::to_writer(inner, Box::new(f), opts)
    }

    /// Wraps `inner`, writing the pcap stream to `w`.
    pub fn to_writer(
        inner: Arc<dyn Device>,
        w: Box<dyn Write + Send>,
        opts: CaptureOptions,
    ) -> io::Result<Capture> {
        if opts.snaplen == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "capture snap length must be at least 1",
            ));
        }
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: opts.snaplen,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::MicroSecond,
            endianness: Endianness::native(),
        };
        let out = Out(Arc::new(Mutex::new(BufWriter::with_capacity(64 * 1024, w))));
        let w = PcapWriter::with_header(out.clone(), header)
            .map_err(|e| io::Error::other(e.to_string()))?;
        // A destination that cannot take even the file header is refused now.
        out.clone().flush()?;
        Ok(Capture {
            inner,
            leader: true,
            shared: Arc::new(Shared {
                sink: Mutex::new(Sink {
                    w: Some(w),
                    out,
                    error: None,
                    bytes: FILE_HEADER,
                }),
                opts,
                captured: AtomicU64::new(0),
                not_captured: AtomicU64::new(0),
            }),
        })
    }

    /// Wraps another device (another queue of the same interface) writing into the same
    /// file, with the same options and counters.
    pub fn share(&self, inner: Arc<dyn Device>) -> Capture {
        Capture {
            inner,
            shared: self.shared.clone(),
            leader: false,
        }
    }

    fn sink(&self) -> std::sync::MutexGuard<'_, Sink> {
        self.shared.sink.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, frame: &[u8]) {
        let mut s = self.sink();
        let keep = frame.len().min(self.shared.opts.snaplen as usize);
        let size = RECORD_HEADER + keep as u64;
        let over = self
            .shared
            .opts
            .max_bytes
            .is_some_and(|m| s.bytes + size > m);
        if s.w.is_none() || over {
            drop(s);
            self.shared.not_captured.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let pkt = PcapPacket::new(ts, orig, &frame[..keep]);
        let res = s.w.as_mut().map(|w| w.write_packet(&pkt));
        match res {
            Some(Ok(_)) => {
                s.bytes += size;
                self.shared.captured.fetch_add(1, Ordering::Relaxed);
            }
            Some(Err(e)) => {
                s.error = Some(e.to_string());
                s.w = None;
                self.shared.not_captured.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }

    /// Writes what is buffered to the file.
    pub fn flush(&self) -> io::Result<()> {
        let s = self.sink();
        if s.w.is_none() {
            return Ok(());
        }
        let mut out = s.out.clone();
        drop(s);
        out.flush()
    }

    /// The counters.
    pub fn stats(&self) -> CaptureStats {
        CaptureStats {
            captured: self.shared.captured.load(Ordering::Relaxed),
            not_captured: self.shared.not_captured.load(Ordering::Relaxed),
            bytes: self.sink().bytes,
        }
    }

    /// The write error that stopped the capture, if one did.
    pub fn error(&self) -> Option<String> {
        self.sink().error.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl Device for Capture {
    fn transmit(&self, frame: Vec<u8>) {
        self.record(&frame);
        self.inner.transmit(frame);
    }

    fn transmit_batch(&self, frames: &mut Vec<Vec<u8>>) {
        for f in frames.iter() {
            self.record(f);
        }
        self.inner.transmit_batch(frames);
    }

    fn poll_rx(&self, now: Instant, out: &mut Vec<Vec<u8>>, budget: usize) {
        let start = out.len();
        self.inner.poll_rx(now, out, budget);
        for f in &out[start..] {
            self.record(f);
        }
    }

    fn next_rx(&self) -> Option<Instant> {
        self.inner.next_rx()
    }

    fn set_rx_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        self.inner.set_rx_waker(waker)
    }

    fn mtu(&self) -> u32 {
        self.inner.mtu()
    }

    fn flush(&self) {
        self.inner.flush()
    }

    fn tx_backlog(&self, now: Instant) -> Option<super::device::TxBacklog> {
        self.inner.tx_backlog(now)
    }

    fn tso(&self) -> bool {
        self.inner.tso()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.inner.counters();
        if !self.leader {
            return v;
        }
        let s = self.stats();
        v.extend([
            ("capture_frames", s.captured),
            ("capture_bytes", s.bytes),
            ("capture_missed", s.not_captured),
        ]);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::{mem_link, ImpairConfig};
    use pcap_file::pcap::PcapReader;

    /// A writer that keeps what it is given (shared with the test).
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct Failing;

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::other("disk full"))
        }
    }

    /// The records of a native-endian microsecond pcap stream, read by hand: pcap-file's
    /// reader refuses a record whose original length exceeds the snap length, which is
    /// what truncation produces (tcpdump and Wireshark read such records).
    fn frames(buf: &[u8]) -> Vec<(Duration, u32, Vec<u8>)> {
        let u32_at = |i: usize| u32::from_ne_bytes(buf[i..i + 4].try_into().unwrap());
        assert_eq!(u32_at(0), 0xa1b2_c3d4, "pcap magic, microseconds");
        assert_eq!(u32_at(20), 1, "link type Ethernet");
        let mut v = Vec::new();
        let mut i = 24;
        while i < buf.len() {
            let ts = Duration::from_secs(u64::from(u32_at(i)))
                + Duration::from_micros(u64::from(u32_at(i + 4)));
            let (incl, orig) = (u32_at(i + 8) as usize, u32_at(i + 12));
            v.push((ts, orig, buf[i + 16..i + 16 + incl].to_vec()));
            i += 16 + incl;
        }
        v
    }

    /// The same stream through pcap-file's reader (no record there is truncated).
    fn frames_by_reader(buf: &[u8]) -> usize {
        let mut r = PcapReader::new(buf).unwrap();
        let mut n = 0;
        while let Some(p) = r.next_packet() {
            p.unwrap();
            n += 1;
        }
        n
    }

    /// A device that segments by itself and reports a fixed backlog.
    struct Offloading;

    impl Device for Offloading {
        fn transmit(&self, _: Vec<u8>) {}
        fn poll_rx(&self, _: Instant, _: &mut Vec<Vec<u8>>, _: usize) {}
        fn next_rx(&self) -> Option<Instant> {
            None
        }
        fn set_rx_waker(&self, _: Box<dyn Fn() + Send + Sync>) {}
        fn mtu(&self) -> u32 {
            1500
        }
        fn tx_backlog(&self, now: Instant) -> Option<crate::dev::TxBacklog> {
            Some(crate::dev::TxBacklog {
                bytes: now.as_nanos() as usize,
                rate_bps: 7,
                capacity: 9,
            })
        }
        fn tso(&self) -> bool {
            true
        }
    }

    #[test]
    fn backlog_and_tso_are_the_inner_devices() {
        let opts = CaptureOptions {
            snaplen: 100,
            max_bytes: None,
        };
        let cap =
            Capture::to_writer(Arc::new(Offloading), Box::new(Shared::default()), opts).unwrap();
        assert!(cap.tso());
        let bl = cap.tx_backlog(Instant::from_nanos(1234)).unwrap();
        assert_eq!((bl.bytes, bl.rate_bps), (1234, 7));
        let (a, _b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 7);
        let cap = Capture::to_writer(a, Box::new(Shared::default()), opts).unwrap();
        assert!(!cap.tso());
        assert_eq!(cap.tx_backlog(Instant::from_nanos(1)), None);
    }

    #[test]
    fn both_directions_are_recorded_in_order_and_truncated_at_the_snap_length() {
        let (a, b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 7);
        let out = Shared::default();
        let opts = CaptureOptions {
            snaplen: 100,
            max_bytes: None,
        };
        let cap = Capture::to_writer(a, Box::new(out.clone()), opts).unwrap();
        cap.transmit(vec![1u8; 60]);
        cap.transmit(vec![2u8; 300]);
        b.transmit(vec![3u8; 80]);
        let mut got = Vec::new();
        cap.poll_rx(crate::clock::now(), &mut got, 16);
        assert_eq!(got.len(), 1, "the received frame is passed on");
        let mut at_b = Vec::new();
        b.poll_rx(crate::clock::now(), &mut at_b, 16);
        assert_eq!(at_b.len(), 2, "transmitted frames go on unchanged");
        assert_eq!(at_b[1].len(), 300);
        cap.flush().unwrap();
        let f = frames(&out.0.lock().unwrap());
        assert_eq!(f.len(), 3);
        assert_eq!((f[0].1, f[0].2.len(), f[0].2[0]), (60, 60, 1));
        assert_eq!((f[1].1, f[1].2.len(), f[1].2[0]), (300, 100, 2));
        assert_eq!((f[2].1, f[2].2.len(), f[2].2[0]), (80, 80, 3));
        assert!(
            f.windows(2).all(|w| w[0].0 <= w[1].0),
            "timestamps never go back"
        );
        assert_eq!(cap.stats().captured, 3);
        assert_eq!(
            cap.stats().bytes,
            FILE_HEADER + 3 * RECORD_HEADER + 60 + 100 + 80
        );
    }

    /// A whole TCP connection between two stacks, captured on one link end: every
    /// segment both ways is in the file, checksums valid, the SYNs and FINs there, and
    /// the payload adds up.
    #[test]
    fn a_tcp_connection_is_captured_whole() {
        use crate::{IfaceConfig, Stack, TcpListener, TcpStream};
        use ember_core::wire::{EthernetRepr, Ipv4Repr, TcpRepr};
        use std::io::{Read, Write as _};
        use std::net::{Ipv4Addr, SocketAddrV4};
        let (ea, eb) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 3);
        let out = Shared::default();
        let cap = Arc::new(
            Capture::to_writer(ea, Box::new(out.clone()), CaptureOptions::default()).unwrap(),
        );
        let iface = |addr| IfaceConfig {
            addr,
            prefix_len: 24,
            mac: None,
            mtu: None,
        };
        let (ia, ib) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let a = Stack::builder()
            .interface(iface(ia), cap.clone())
            .build()
            .unwrap();
        let b = Stack::builder().interface(iface(ib), eb).build().unwrap();
        let l = TcpListener::bind(&b, SocketAddrV4::new(ib, 9)).unwrap();
        let t = std::time::Duration::from_secs(10);
        l.set_accept_timeout(Some(t)).unwrap();
        let sink = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(t)).unwrap();
            let mut v = Vec::new();
            s.read_to_end(&mut v).unwrap();
            v.len()
        });
        let mut c = TcpStream::connect_timeout(&a, SocketAddrV4::new(ib, 9), t).unwrap();
        let data = vec![0x5au8; 100_000];
        c.write_all(&data).unwrap();
        drop(c);
        assert_eq!(sink.join().unwrap(), 100_000);
        // The closing handshake may still be in flight: wait (bounded) for both FINs.
        let deadline = std::time::Instant::now() + t;
        let (mut syn, mut fin, mut payload) = (0, 0, 0usize);
        while std::time::Instant::now() < deadline {
            cap.flush().unwrap();
            (syn, fin, payload) = (0, 0, 0);
            for (_, orig, f) in frames(&out.0.lock().unwrap()) {
                assert_eq!(orig as usize, f.len());
                let Ok((_, ip)) = EthernetRepr::parse(&f) else {
                    continue;
                };
                let Ok((ipr, seg)) = Ipv4Repr::parse(ip, true) else {
                    continue;
                };
                let (tcp, body) = TcpRepr::parse(seg, ipr.src, ipr.dst, true).expect("valid TCP");
                syn += usize::from(tcp.flags.syn());
                fin += usize::from(tcp.flags.fin());
                if ipr.src == ia {
                    payload += body.len();
                }
            }
            if fin >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(syn, 2, "SYN and SYN-ACK");
        assert_eq!(fin, 2, "a FIN each way");
        // At least every byte once (a retransmission on a stalled machine adds more).
        assert!(payload >= 100_000, "{payload} payload bytes captured");
        assert!(cap.error().is_none());
        a.shutdown();
        b.shutdown();
    }

    #[test]
    fn the_size_limit_and_write_errors_stop_the_capture_not_the_traffic() {
        let (a, b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 7);
        let out = Shared::default();
        let opts = CaptureOptions {
            snaplen: 1000,
            max_bytes: Some(FILE_HEADER + 2 * (RECORD_HEADER + 50)),
        };
        let cap = Capture::to_writer(a.clone(), Box::new(out.clone()), opts).unwrap();
        for _ in 0..5 {
            cap.transmit(vec![0u8; 50]);
        }
        cap.flush().unwrap();
        assert_eq!(frames(&out.0.lock().unwrap()).len(), 2);
        assert_eq!(frames_by_reader(&out.0.lock().unwrap()), 2);
        let s = cap.stats();
        assert_eq!((s.captured, s.not_captured), (2, 3));
        let mut at_b = Vec::new();
        b.poll_rx(crate::clock::now(), &mut at_b, 16);
        assert_eq!(at_b.len(), 5);

        // A writer that fails: the header write already fails, so the wrapper cannot
        // be made; one that fails later stops capturing and keeps forwarding.
        assert!(
            Capture::to_writer(a.clone(), Box::new(Failing), CaptureOptions::default()).is_err()
        );
        assert!(Capture::to_writer(
            a.clone(),
            Box::new(out.clone()),
            CaptureOptions {
                snaplen: 0,
                max_bytes: None
            }
        )
        .is_err());
    }
}
