//! AF_PACKET: ember on an existing Linux Ethernet interface, beside the kernel's stack.
//!
//! Where a TAP interface gives ember a link of its own, an AF_PACKET socket lets it share
//! an interface the kernel already drives (a veth end, a NIC): every frame the interface
//! receives is also handed to our sockets, and every frame we send leaves on it. ember
//! uses a MAC address of its own (the stack interface's, passed in as
//! [`AfPacketConfig::mac`]) and keeps only the frames meant for it.
//!
//! **What each queue is.** One `SOCK_RAW` packet socket per queue, bound to the interface
//! for `ETH_P_ALL` (it is created with protocol 0 and only starts receiving when bound,
//! so no frame of another interface ever reaches it), with a `TPACKET_V3` receive ring
//! mapped into our memory:
//!
//! * The ring is `block_count` blocks of `block_size` bytes. The kernel fills one block at
//!   a time with variable-length frames (a `tpacket3_hdr`, a `sockaddr_ll`, then the frame
//!   at `tp_mac`, each linked to the next by `tp_next_offset`) and *retires* the block to
//!   us, setting `block_status` to `TP_STATUS_USER`, when it is full or when the retire
//!   timer (`retire_timeout_ms`) fires. We walk the blocks in ring order, copy each wanted
//!   frame out, and hand the block back with `TP_STATUS_KERNEL`. If every block is ours,
//!   the kernel drops (counted by the kernel, read through `PACKET_STATISTICS`). The
//!   price of V3's batching is latency at low rates: a lone frame waits up to the retire
//!   timeout (1 ms by default) before we can see it.
//! * `tp_frame_size` means nothing for V3 receive (frames are packed); it only has to
//!   satisfy the kernel's checks. A frame larger than a block minus its header arrives cut
//!   short (`tp_snaplen < tp_len`): such frames are dropped and counted. Blocks are at
//!   least 128 KiB, so a 64 KiB frame (a GSO super-frame the kernel may pass over a veth)
//!   always fits whole.
//! * Several queues join one `PACKET_FANOUT` group (`PACKET_FANOUT_HASH`): the kernel
//!   sends each flow's frames to one socket by its flow hash, so a connection's segments
//!   arrive on one queue and in order. The group id is derived from the process id, the
//!   interface index and a per-process counter. The group is asked to ignore outgoing
//!   frames (`PACKET_FANOUT_FLAG_IGNORE_OUTGOING`; each socket also sets
//!   `PACKET_IGNORE_OUTGOING`), and frames of type `PACKET_OUTGOING` are dropped here in
//!   any case, so ember never receives what it (or the kernel) transmitted.
//! * Frames kept: destination MAC equal to ember's, broadcast (ARP requests), and
//!   multicast only when [`AfPacketConfig::multicast`] says so; everything else (the
//!   kernel's own unicast traffic, IPv6 neighbour discovery, frames whose VLAN tag the
//!   NIC stripped) is dropped and counted. When ember's MAC is not the interface's, the
//!   first socket adds it to the interface's unicast filter (`PACKET_MR_UNICAST`, or
//!   promiscuous mode if that is refused) so that a real NIC passes its frames up; both
//!   are undone by the kernel when the socket closes.
//! * Frames the kernel generated on the other end of a veth arrive with their TCP/UDP
//!   checksum only partial (`TP_STATUS_CSUMNOTREADY`, checksum offload): we complete it
//!   here (IPv4 TCP and UDP) before the stack verifies it.
//!
//! **The kernel receives these frames too.** The interface still belongs to the kernel:
//! it sees every frame ember sees, and ember's frames go out beside its own. That is
//! expected and harmless as long as ember's IP address is not one the kernel has on that
//! interface (the kernel drops unicast frames for a MAC that is not its own, and ignores
//! ARP requests for an address it does not have). In the tests, the ember end of the veth
//! pair has no IP address at all.
//!
//! **Transmit** is batched: `transmit` gathers frames (up to [`TX_BATCH`]) and one
//! `sendmmsg(2)` with `MSG_DONTWAIT` sends them when the squeue that wrote them leaves
//! ([`Device::flush`], called from the perimeter's `leave`), or at once when the batch is
//! full, so a frame waits at most for the rest of one drain. (A `TPACKET_V3` transmit ring
//! is not offered by many kernels.) A full socket buffer or a full device queue (`EAGAIN`,
//! `ENOBUFS`) drops the rest of the batch and counts it; a frame refused otherwise (too
//! long, interface down) counts as an error and the rest goes on. Nothing blocks.
//!
//! **Waking the stack** works as for the TAP device: each queue has a notifier thread
//! that sleeps in `poll(2)` on the socket (readable once the block before the kernel's
//! current one is ours), wakes the stack once, then sleeps on a condition variable until
//! the squeue has read the ring dry; an `eventfd` stops it on drop.
//!
//! **Invariants.**
//! * Only the squeue that owns a queue reads its ring (under the queue's `rx` mutex), in
//!   ring order, and only blocks whose status says `TP_STATUS_USER` (read with acquire
//!   ordering); a block is handed back (release store of `TP_STATUS_KERNEL`) only after
//!   every slice into it is dead.
//! * Every offset read from the ring (block header, frame header, `tp_mac`, `tp_snaplen`,
//!   `tp_next_offset`) is checked against the block before use, in safe code over a
//!   `&[u8]`; a corrupt block is counted, handed back and skipped, never a panic nor an
//!   out-of-bounds read.
//! * On drop the notifier thread is stopped and joined first; then the ring is unmapped,
//!   then the socket closed.
//!
//! `unsafe` is used for system calls (each with its own `SAFETY` note) and for the two
//! views into the mapped ring: the atomic status word of a block and the byte slice of a
//! block we own.

use super::device::Device;
use super::tap::{ctl_socket, ifr_ioctl, IfReq, Notifier, OnError};
use ember_core::time::Instant;
use ember_core::wire::checksum;
use ember_core::wire::MacAddr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The most queues one AF_PACKET device opens here (a fanout group takes up to 256).
pub const MAX_QUEUES: usize = 64;

// <linux/if_packet.h> and <linux/if_ether.h>.
const ETH_P_ALL: u16 = 0x0003;
const PACKET_MR_UNICAST: libc::c_int = 3;
/// `struct tpacket_block_desc`: `version`, `offset_to_priv`, then `tpacket_hdr_v1`.
const BLOCK_HDR_LEN: usize = 48;
const OFF_BLOCK_STATUS: usize = 8;
const OFF_NUM_PKTS: usize = 12;
const OFF_FIRST_PKT: usize = 16;
const OFF_BLK_LEN: usize = 20;
/// `struct tpacket3_hdr`, then the `struct sockaddr_ll` the kernel writes after it.
const FRAME_HDR_LEN: usize = 48;
const SLL_LEN: usize = 20;
const FRAME_META_LEN: usize = FRAME_HDR_LEN + SLL_LEN;
const OFF_NEXT: usize = 0;
const OFF_SNAPLEN: usize = 12;
const OFF_LEN: usize = 16;
const OFF_STATUS: usize = 20;
const OFF_MAC: usize = 24;
/// `sll_pkttype` within the `sockaddr_ll` after the frame header.
const OFF_PKTTYPE: usize = FRAME_HDR_LEN + 10;

// The layouts above are the kernel's; check them against libc's definitions.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<libc::tpacket_block_desc>() == BLOCK_HDR_LEN);
    assert!(
        offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, block_status)
            == OFF_BLOCK_STATUS
    );
    assert!(
        offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, num_pkts)
            == OFF_NUM_PKTS
    );
    assert!(
        offset_of!(libc::tpacket_block_desc, hdr)
            + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt)
            == OFF_FIRST_PKT
    );
    assert!(
        offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, blk_len)
            == OFF_BLK_LEN
    );
    assert!(size_of::<libc::tpacket3_hdr>() == FRAME_HDR_LEN);
    assert!(size_of::<libc::sockaddr_ll>() == SLL_LEN);
    assert!(offset_of!(libc::tpacket3_hdr, tp_next_offset) == OFF_NEXT);
    assert!(offset_of!(libc::tpacket3_hdr, tp_snaplen) == OFF_SNAPLEN);
    assert!(offset_of!(libc::tpacket3_hdr, tp_len) == OFF_LEN);
    assert!(offset_of!(libc::tpacket3_hdr, tp_status) == OFF_STATUS);
    assert!(offset_of!(libc::tpacket3_hdr, tp_mac) == OFF_MAC);
    assert!(FRAME_HDR_LEN + offset_of!(libc::sockaddr_ll, sll_pkttype) == OFF_PKTTYPE);
};

/// The shape of each queue's `TPACKET_V3` receive ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a multiple of the page size, 128 KiB ..= 16 MiB (so that a 64 KiB
    /// frame always fits).
    pub block_size: u32,
    /// Blocks in the ring: 2 ..= 4096, and at most 1 GiB per ring in all.
    pub block_count: u32,
    /// The kernel's nominal frame size: a multiple of 16, 128 ..= `block_size`. V3 packs
    /// frames of any length into a block; this only satisfies the kernel's checks.
    pub frame_size: u32,
    /// How long (ms, 1 ..= 1000) the kernel fills a block before handing it over
    /// anyway: the worst added latency at low rates.
    pub retire_timeout_ms: u32,
}

impl Default for RingConfig {
    /// 32 blocks of 256 KiB (8 MiB per queue), 2 KiB nominal frames, 1 ms retire timeout.
    fn default() -> RingConfig {
        RingConfig {
            block_size: 256 << 10,
            block_count: 32,
            frame_size: 2048,
            retire_timeout_ms: 1,
        }
    }
}

/// Smallest block: a 64 KiB frame with its headers fits.
const MIN_BLOCK: u32 = 128 << 10;
const MAX_BLOCK: u32 = 16 << 20;
const MAX_RING_BYTES: u64 = 1 << 30;

impl RingConfig {
    /// Checks every field; the error (`InvalidInput`) names the allowed range.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        let page = page_size();
        if !(MIN_BLOCK..=MAX_BLOCK).contains(&self.block_size)
            || self.block_size as usize % page != 0
        {
            return bad(format!(
                "AF_PACKET block size {}: must be a multiple of the page size ({page}) in \
                 {MIN_BLOCK} ..= {MAX_BLOCK}",
                self.block_size
            ));
        }
        if !(2..=4096).contains(&self.block_count) {
            return bad(format!(
                "AF_PACKET block count {}: must be 2 ..= 4096",
                self.block_count
            ));
        }
        if u64::from(self.block_size) * u64::from(self.block_count) > MAX_RING_BYTES {
            return bad(format!(
                "AF_PACKET ring of {} x {} bytes: block count x block size must be \
                 ..= {MAX_RING_BYTES} bytes",
                self.block_count, self.block_size
            ));
        }
        if !(128..=self.block_size).contains(&self.frame_size) || self.frame_size % 16 != 0 {
            return bad(format!(
                "AF_PACKET frame size {}: must be a multiple of 16 in 128 ..= block size ({})",
                self.frame_size, self.block_size
            ));
        }
        if !(1..=1000).contains(&self.retire_timeout_ms) {
            return bad(format!(
                "AF_PACKET retire timeout {} ms: must be 1 ..= 1000",
                self.retire_timeout_ms
            ));
        }
        Ok(())
    }

    fn ring_bytes(&self) -> usize {
        self.block_size as usize * self.block_count as usize
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers and has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// How to open an AF_PACKET device.
#[derive(Debug, Clone)]
pub struct AfPacketConfig {
    /// The interface (it must exist; it is not brought up here).
    pub iface: String,
    /// Queues (1 ..= [`MAX_QUEUES`]): one socket and ring each; more than one share the
    /// interface's frames by flow hash.
    pub queues: usize,
    /// Each queue's receive ring.
    pub ring: RingConfig,
    /// ember's MAC address on this interface: the one the stack's interface uses. Set
    /// `IfaceConfig::mac` explicitly and pass the same here (left `None`, the stack
    /// derives `02:65:a:b:c:d` from its IPv4 address `a.b.c.d`). A unicast address.
    pub mac: MacAddr,
    /// Also keep multicast frames (default: only ember's unicast and broadcast).
    pub multicast: bool,
}

impl AfPacketConfig {
    /// One queue, the default ring, no multicast.
    pub fn new(iface: &str, mac: MacAddr) -> AfPacketConfig {
        AfPacketConfig {
            iface: iface.to_string(),
            queues: 1,
            ring: RingConfig::default(),
            mac,
            multicast: false,
        }
    }
}

/// Counters of one AF_PACKET queue.
#[derive(Debug, Default)]
pub struct AfPacketStats {
    /// Frames handed to the stack.
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    /// Frames handed to the stack that were longer than the interface MTU (GSO
    /// super-frames the kernel passed on whole, e.g. over a veth).
    pub rx_jumbo: AtomicU64,
    /// Frames not for ember (another unicast MAC, multicast when not wanted, a stripped
    /// VLAN tag).
    pub rx_filtered: AtomicU64,
    /// Frames the interface transmitted (seen only if the kernel cannot ignore them).
    pub rx_outgoing: AtomicU64,
    /// Frames cut short by the ring (`tp_snaplen < tp_len`) or shorter than an Ethernet
    /// header.
    pub rx_truncated: AtomicU64,
    /// Blocks whose header, or one of whose frame headers, was inconsistent (the rest of
    /// the block is skipped).
    pub rx_corrupt: AtomicU64,
    /// Partial TCP/UDP checksums completed here (`TP_STATUS_CSUMNOTREADY`).
    pub rx_csum_filled: AtomicU64,
    /// Blocks read and handed back.
    pub rx_blocks: AtomicU64,
    /// Frames the kernel dropped because the ring was full (`PACKET_STATISTICS`, as of
    /// the last [`AfPacket::counters`]).
    pub rx_ring_drops: AtomicU64,
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Frames dropped because the socket buffer or device queue was full.
    pub tx_dropped: AtomicU64,
    /// Frames the kernel refused otherwise (too long, too short, interface down).
    pub tx_errors: AtomicU64,
    /// `sendmmsg` calls that sent frames (frames / batches = the batching achieved).
    pub tx_batches: AtomicU64,
    /// Times the notifier thread woke the stack.
    pub wakeups: AtomicU64,
}

/// A snapshot of [`AfPacketStats`] summed over queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfPacketCounters {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub rx_jumbo: u64,
    pub rx_filtered: u64,
    pub rx_outgoing: u64,
    pub rx_truncated: u64,
    pub rx_corrupt: u64,
    pub rx_csum_filled: u64,
    pub rx_blocks: u64,
    pub rx_ring_drops: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub tx_dropped: u64,
    pub tx_errors: u64,
    pub tx_batches: u64,
    pub wakeups: u64,
}

impl AfPacketStats {
    fn snapshot(&self) -> AfPacketCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AfPacketCounters {
            rx_frames: g(&self.rx_frames),
            rx_bytes: g(&self.rx_bytes),
            rx_jumbo: g(&self.rx_jumbo),
            rx_filtered: g(&self.rx_filtered),
            rx_outgoing: g(&self.rx_outgoing),
            rx_truncated: g(&self.rx_truncated),
            rx_corrupt: g(&self.rx_corrupt),
            rx_csum_filled: g(&self.rx_csum_filled),
            rx_blocks: g(&self.rx_blocks),
            rx_ring_drops: g(&self.rx_ring_drops),
            tx_frames: g(&self.tx_frames),
            tx_bytes: g(&self.tx_bytes),
            tx_dropped: g(&self.tx_dropped),
            tx_errors: g(&self.tx_errors),
            tx_batches: g(&self.tx_batches),
            wakeups: g(&self.wakeups),
        }
    }
}

impl core::ops::AddAssign for AfPacketCounters {
    fn add_assign(&mut self, o: AfPacketCounters) {
        self.rx_frames += o.rx_frames;
        self.rx_bytes += o.rx_bytes;
        self.rx_jumbo += o.rx_jumbo;
        self.rx_filtered += o.rx_filtered;
        self.rx_outgoing += o.rx_outgoing;
        self.rx_truncated += o.rx_truncated;
        self.rx_corrupt += o.rx_corrupt;
        self.rx_csum_filled += o.rx_csum_filled;
        self.rx_blocks += o.rx_blocks;
        self.rx_ring_drops += o.rx_ring_drops;
        self.tx_frames += o.tx_frames;
        self.tx_bytes += o.tx_bytes;
        self.tx_dropped += o.tx_dropped;
        self.tx_errors += o.tx_errors;
        self.tx_batches += o.tx_batches;
        self.wakeups += o.wakeups;
    }
}

/// An open AF_PACKET device: its queues on one interface.
pub struct AfPacket {
    iface: String,
    ifindex: i32,
    mtu: u32,
    fanout: Option<u16>,
    queues: Vec<Arc<AfPacketQueue>>,
}

impl core::fmt::Debug for AfPacket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AfPacket")
            .field("iface", &self.iface)
            .field("ifindex", &self.ifindex)
            .field("queues", &self.queues.len())
            .field("mtu", &self.mtu)
            .field("fanout", &self.fanout)
            .finish()
    }
}

/// Opens packet sockets in this process: distinguishes the fanout groups of several
/// devices on one interface.
static OPENED: AtomicU64 = AtomicU64::new(0);

/// A fanout group id from the process id, the interface index and a per-process count.
fn fanout_id(pid: u32, ifindex: i32, seq: u64) -> u16 {
    let h = super::derive_seed((u64::from(pid) << 32) | u64::from(ifindex as u32), seq);
    (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) as u16
}

impl AfPacket {
    /// Opens one packet socket and ring per queue on the interface, joins them into a
    /// fanout group if there are several, and starts each queue's notifier thread.
    /// Needs `CAP_NET_RAW`; the calling thread's network namespace is the one used.
    pub fn open(cfg: &AfPacketConfig) -> io::Result<AfPacket> {
        if cfg.queues == 0 || cfg.queues > MAX_QUEUES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "AF_PACKET queues {}: must be 1 ..= {MAX_QUEUES}",
                    cfg.queues
                ),
            ));
        }
        cfg.ring.validate()?;
        if cfg.mac.is_multicast() || cfg.mac == MacAddr::ZERO {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("AF_PACKET MAC {:?}: must be a unicast address", cfg.mac),
            ));
        }
        IfReq::new(&cfg.iface)?;
        let ctl = ctl_socket()?;
        let mut r = IfReq::new(&cfg.iface)?;
        ifr_ioctl(ctl.as_raw_fd(), libc::SIOCGIFINDEX, &mut r)
            .map_err(|e| io::Error::new(e.kind(), format!("interface {}: {e}", cfg.iface)))?;
        let ifindex = r.value;
        let mut r = IfReq::new(&cfg.iface)?;
        ifr_ioctl(ctl.as_raw_fd(), libc::SIOCGIFMTU, &mut r)?;
        let mtu = (r.value as u32).clamp(68, 65_535);
        // `ifr_hwaddr` is a `struct sockaddr` at offset 16: family (2 bytes), then the
        // address, which thus spans the top half of `value` and the start of `_pad`.
        let mut r = IfReq::new(&cfg.iface)?;
        ifr_ioctl(ctl.as_raw_fd(), libc::SIOCGIFHWADDR, &mut r)?;
        let v = r.value.to_ne_bytes();
        let hw = [v[2], v[3], r._pad[0], r._pad[1], r._pad[2], r._pad[3]];
        let seq = OPENED.fetch_add(1, Ordering::Relaxed);
        let group = (cfg.queues > 1).then(|| fanout_id(std::process::id(), ifindex, seq));
        let mut fanout_flags = libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
        let mut queues = Vec::with_capacity(cfg.queues);
        for i in 0..cfg.queues {
            let (fd, ring) = open_socket(ifindex, &cfg.ring)?;
            if let Some(id) = group {
                let join = |flags: libc::c_uint| {
                    let arg = libc::c_int::from(id) | ((flags as libc::c_int) << 16);
                    setsockopt(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
                };
                let mut r = join(fanout_flags);
                if i == 0
                    && r.as_ref()
                        .is_err_and(|e| e.raw_os_error() == Some(libc::EINVAL))
                {
                    // A kernel without PACKET_FANOUT_FLAG_IGNORE_OUTGOING: outgoing frames
                    // are then dropped by type here.
                    fanout_flags = libc::PACKET_FANOUT_HASH;
                    r = join(fanout_flags);
                }
                r.map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("PACKET_FANOUT group {id} on {}: {e}", cfg.iface),
                    )
                })?;
            }
            if i == 0 && cfg.mac.0 != hw {
                add_unicast(fd.as_raw_fd(), ifindex, &cfg.mac).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot receive for {:?} on {}: {e}", cfg.mac, cfg.iface),
                    )
                })?;
            }
            queues.push(AfPacketQueue::start(&cfg.iface, i, fd, ring, cfg, mtu)?);
        }
        Ok(AfPacket {
            iface: cfg.iface.clone(),
            ifindex,
            mtu,
            fanout: group,
            queues,
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.iface
    }

    /// The interface index (in the namespace it was opened in).
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The interface MTU when it was opened.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The fanout group id, when there are several queues.
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout
    }

    /// The queues as devices, for [`StackBuilder::interface_queues`](crate::StackBuilder::interface_queues).
    pub fn devices(&self) -> Vec<Arc<dyn Device>> {
        self.queues
            .iter()
            .map(|q| q.clone() as Arc<dyn Device>)
            .collect()
    }

    /// The queues themselves.
    pub fn queues(&self) -> &[Arc<AfPacketQueue>] {
        &self.queues
    }

    /// Counters summed over the queues (first collecting the kernel's ring drops).
    pub fn counters(&self) -> AfPacketCounters {
        let mut c = AfPacketCounters::default();
        for q in &self.queues {
            c += q.counters();
        }
        c
    }
}

/// `setsockopt(fd, level, name, &value)`.
fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live `T` for the whole call and we pass its exact size; the
    // kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value as *const T as *const libc::c_void,
            core::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Has the interface pass up frames for `mac`: its unicast filter, else promiscuous mode.
fn add_unicast(fd: RawFd, ifindex: i32, mac: &MacAddr) -> io::Result<()> {
    let mut m = libc::packet_mreq {
        mr_ifindex: ifindex,
        mr_type: PACKET_MR_UNICAST as libc::c_ushort,
        mr_alen: 6,
        mr_address: [0; 8],
    };
    m.mr_address[..6].copy_from_slice(&mac.0);
    if setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &m).is_ok() {
        return Ok(());
    }
    m.mr_type = libc::PACKET_MR_PROMISC as libc::c_ushort;
    m.mr_alen = 0;
    m.mr_address = [0; 8];
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &m)
}

/// One queue's socket, with its ring mapped, bound to the interface.
fn open_socket(ifindex: i32, rc: &RingConfig) -> io::Result<(OwnedFd, Ring)> {
    // Protocol 0: the socket receives nothing until it is bound to the interface below.
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot open an AF_PACKET socket: {e} (needs CAP_NET_RAW)"),
        ));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = fd.as_raw_fd();
    let v3: libc::c_int = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
    setsockopt(raw, libc::SOL_PACKET, libc::PACKET_VERSION, &v3)?;
    let req = libc::tpacket_req3 {
        tp_block_size: rc.block_size,
        tp_block_nr: rc.block_count,
        tp_frame_size: rc.frame_size,
        tp_frame_nr: (rc.block_size / rc.frame_size) * rc.block_count,
        tp_retire_blk_tov: rc.retire_timeout_ms,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    setsockopt(raw, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
        .map_err(|e| io::Error::new(e.kind(), format!("PACKET_RX_RING {rc:?}: {e}")))?;
    let ring = Ring::map(raw, rc)?;
    // Best effort: older kernels lack it, and outgoing frames are dropped by type anyway.
    let one: libc::c_int = 1;
    let _ = setsockopt(raw, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one);
    // Best effort: room for bursts of transmitted frames (capped by wmem_max).
    let sndbuf: libc::c_int = 1 << 20;
    let _ = setsockopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf);
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { core::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = ETH_P_ALL.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is a live sockaddr_ll and we pass its exact size; bind only reads it.
    let r = unsafe {
        libc::bind(
            raw,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            core::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fd, ring))
}

/// A queue's mapped `TPACKET_V3` receive ring.
struct Ring {
    base: *mut u8,
    len: usize,
    block_size: usize,
    blocks: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value. The owning queue reads
// it only under its `rx` mutex (one thread at a time), through an atomic for the status
// words and through slices of blocks the kernel has handed over (and will not write until
// handed back), so moving or sharing the handle across threads is sound.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    fn map(fd: RawFd, rc: &RingConfig) -> io::Result<Ring> {
        let len = rc.ring_bytes();
        // SAFETY: a fresh shared mapping of the socket's ring, of exactly the size the
        // kernel set up; it is owned by the returned value and unmapped on its drop.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring {
            base: p as *mut u8,
            len,
            block_size: rc.block_size as usize,
            blocks: rc.block_count as usize,
        })
    }

    /// Block `i`'s status word. `i < self.blocks`.
    fn status(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.blocks);
        // SAFETY: `i * block_size + 8 + 4 <= len`, so the word lies inside the live
        // mapping; it is 4-aligned (the mapping is page-aligned, blocks are page
        // multiples, the offset is 8). The kernel also accesses it only as a whole word.
        unsafe {
            AtomicU32::from_ptr(self.base.add(i * self.block_size + OFF_BLOCK_STATUS) as *mut u32)
        }
    }

    /// Whether block `i` is ours to read.
    fn owned(&self, i: usize) -> bool {
        self.status(i).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Block `i`'s bytes. Only while [`Ring::owned`] and until [`Ring::release`].
    fn block(&self, i: usize) -> &[u8] {
        assert!(i < self.blocks);
        // SAFETY: the range `[i * block_size, (i + 1) * block_size)` lies inside the live
        // mapping. Callers hold it only while the block is ours (status USER, read with
        // acquire ordering after the kernel's release), during which the kernel does not
        // write it, and drop it before handing the block back.
        unsafe { core::slice::from_raw_parts(self.base.add(i * self.block_size), self.block_size) }
    }

    /// Hands block `i` back to the kernel.
    fn release(&self, i: usize) {
        self.status(i)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no slice into it outlives the
        // ring (they borrow it).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Why a block or frame was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Corrupt {
    /// Block header out of bounds or inconsistent (`blk_len`, `offset_to_first_pkt`).
    Block,
    /// A frame header reaching past the block's used length.
    FrameHeader,
    /// Frame data (`tp_mac`, `tp_snaplen`) outside the block.
    FrameData,
    /// `tp_next_offset` overlapping this frame or leaving the block.
    Next,
}

/// One frame as the ring describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RxFrame<'a> {
    /// The captured bytes (`tp_snaplen` of them).
    data: &'a [u8],
    /// The frame's length on the wire (`tp_len`).
    wire_len: u32,
    /// `tp_status` (`TP_STATUS_CSUMNOTREADY`, `TP_STATUS_VLAN_VALID`, ...).
    status: u32,
    /// `sll_pkttype` (`PACKET_HOST`, `PACKET_OUTGOING`, ...).
    pkttype: u8,
}

fn rd32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
}

fn rd16(b: &[u8], at: usize) -> Option<u16> {
    let w = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes([w[0], w[1]]))
}

/// A position in a block's chain of frames: a block is walked with [`BlockCursor::open`]
/// and then [`BlockCursor::next`] on the same bytes. Only offsets are kept, so a cursor
/// survives between polls while the block stays ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockCursor {
    /// Frames not yet returned.
    left: u32,
    /// Offset of the next frame header.
    off: usize,
    /// End of the block's used part (`blk_len`).
    end: usize,
}

impl BlockCursor {
    /// Reads and checks the block header.
    fn open(block: &[u8]) -> Result<BlockCursor, Corrupt> {
        if block.len() < BLOCK_HDR_LEN {
            return Err(Corrupt::Block);
        }
        let num = rd32(block, OFF_NUM_PKTS).ok_or(Corrupt::Block)?;
        let first = rd32(block, OFF_FIRST_PKT).ok_or(Corrupt::Block)? as usize;
        let end = rd32(block, OFF_BLK_LEN).ok_or(Corrupt::Block)? as usize;
        if end > block.len() || first < BLOCK_HDR_LEN || first > end {
            return Err(Corrupt::Block);
        }
        Ok(BlockCursor {
            left: num,
            off: first,
            end,
        })
    }

    /// The next frame; `None` at the end of the block. After an error the cursor is
    /// exhausted (the rest of the block cannot be trusted).
    fn next<'a>(&mut self, block: &'a [u8]) -> Option<Result<RxFrame<'a>, Corrupt>> {
        if self.left == 0 {
            return None;
        }
        let r = self.frame(block);
        if r.is_err() {
            self.left = 0;
        }
        Some(r)
    }

    fn frame<'a>(&mut self, block: &'a [u8]) -> Result<RxFrame<'a>, Corrupt> {
        let end = self.end.min(block.len());
        let off = self.off;
        let meta_end = off
            .checked_add(FRAME_META_LEN)
            .filter(|&e| e <= end)
            .ok_or(Corrupt::FrameHeader)?;
        let h = &block[off..meta_end];
        let field = |at| rd32(h, at).ok_or(Corrupt::FrameHeader);
        let next = field(OFF_NEXT)? as usize;
        let snaplen = field(OFF_SNAPLEN)? as usize;
        let wire_len = field(OFF_LEN)?;
        let status = field(OFF_STATUS)?;
        let mac = usize::from(rd16(h, OFF_MAC).ok_or(Corrupt::FrameHeader)?);
        let pkttype = h[OFF_PKTTYPE];
        // The data follows the headers and ends inside the block's used part.
        let span = mac.checked_add(snaplen).ok_or(Corrupt::FrameData)?;
        if mac < FRAME_META_LEN || off.checked_add(span).is_none_or(|e| e > end) {
            return Err(Corrupt::FrameData);
        }
        self.left -= 1;
        if self.left > 0 {
            // The next frame starts after this one's data, inside the block.
            if next < span || off.checked_add(next).is_none_or(|n| n > end) {
                return Err(Corrupt::Next);
            }
            self.off = off + next;
        }
        Ok(RxFrame {
            data: &block[off + mac..off + span],
            wire_len,
            status,
            pkttype,
        })
    }
}

/// What becomes of a frame from the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accept,
    Outgoing,
    Truncated,
    NotOurs,
}

fn verdict(f: &RxFrame<'_>, mac: &MacAddr, multicast: bool) -> Verdict {
    if f.pkttype == libc::PACKET_OUTGOING {
        return Verdict::Outgoing;
    }
    if (f.data.len() as u64) < u64::from(f.wire_len) || f.data.len() < 14 {
        return Verdict::Truncated;
    }
    if f.status & libc::TP_STATUS_VLAN_VALID != 0 {
        // The NIC stripped an 802.1Q tag: not ember's untagged LAN.
        return Verdict::NotOurs;
    }
    let dst = &f.data[..6];
    if dst == mac.0 || dst == MacAddr::BROADCAST.0 || (multicast && dst[0] & 1 != 0) {
        Verdict::Accept
    } else {
        Verdict::NotOurs
    }
}

/// Completes the TCP or UDP checksum of an IPv4 frame whose checksum the kernel left
/// partial (checksum offload): recomputed from scratch over the pseudo-header and the
/// segment. False if it is not an unfragmented IPv4 TCP/UDP frame that fits.
fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    if frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
        return false;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
    if ip[0] >> 4 != 4 || ihl < 20 || total < ihl || total > ip.len() || frag != 0 {
        return false;
    }
    let (proto, at) = match ip[9] {
        6 => (6u8, 16usize),
        17 => (17u8, 6usize),
        _ => return false,
    };
    if total < ihl + at + 2 {
        return false;
    }
    let src = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = std::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let (l4, end) = (14 + ihl, 14 + total);
    frame[l4 + at..l4 + at + 2].copy_from_slice(&[0, 0]);
    let ph = checksum::pseudo_header(src, dst, proto, (total - ihl) as u16);
    let mut c = checksum::finish(checksum::combine(ph, checksum::sum(&frame[l4..end])));
    if proto == 17 && c == 0 {
        c = 0xffff;
    }
    frame[l4 + at..l4 + at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Where the owning squeue is in the ring.
#[derive(Debug)]
struct RxState {
    /// The block to read next (ring order).
    block: usize,
    /// The walk through that block, once it is ours and its header checked.
    cursor: Option<BlockCursor>,
}

/// One queue of an AF_PACKET device: a [`Device`].
pub struct AfPacketQueue {
    // Field order is drop order: the ring is unmapped before the socket is closed (the
    // notifier thread is stopped in `Drop::drop`, before either).
    ring: Ring,
    fd: OwnedFd,
    mac: MacAddr,
    multicast: bool,
    mtu: u32,
    notifier: Notifier,
    rx: Mutex<RxState>,
    /// Frames waiting for one `sendmmsg` (sent at [`Device::flush`] or when full).
    tx_batch: Mutex<Vec<Vec<u8>>>,
    /// Counters.
    pub stats: Arc<AfPacketStats>,
}

/// Frames gathered for one `sendmmsg` at most.
pub const TX_BATCH: usize = 32;

impl core::fmt::Debug for AfPacketQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AfPacketQueue")
            .field("fd", &self.fd.as_raw_fd())
            .field("blocks", &self.ring.blocks)
            .field("block_size", &self.ring.block_size)
            .field("mac", &self.mac)
            .field("mtu", &self.mtu)
            .finish()
    }
}

impl AfPacketQueue {
    fn start(
        iface: &str,
        i: usize,
        fd: OwnedFd,
        ring: Ring,
        cfg: &AfPacketConfig,
        mtu: u32,
    ) -> io::Result<Arc<AfPacketQueue>> {
        let stats = Arc::new(AfPacketStats::default());
        let s2 = stats.clone();
        let notifier = Notifier::start(
            format!("afp-{iface}-q{i}"),
            fd.as_raw_fd(),
            OnError::ClearAndGoOn,
            move || {
                s2.wakeups.fetch_add(1, Ordering::Relaxed);
            },
        )?;
        Ok(Arc::new(AfPacketQueue {
            ring,
            fd,
            mac: cfg.mac,
            multicast: cfg.multicast,
            mtu,
            notifier,
            rx: Mutex::new(RxState {
                block: 0,
                cursor: None,
            }),
            tx_batch: Mutex::new(Vec::with_capacity(TX_BATCH)),
            stats,
        }))
    }

    /// This queue's counters, after adding the kernel's ring drops since the last call.
    pub fn counters(&self) -> AfPacketCounters {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = core::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` and `len` are live for the call and `len` is `st`'s size; the
        // kernel writes at most `len` bytes (and reading resets its counters).
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats_v3 as *mut libc::c_void,
                &mut len,
            )
        };
        if rc == 0 {
            self.stats
                .rx_ring_drops
                .fetch_add(u64::from(st.tp_drops), Ordering::Relaxed);
        }
        self.stats.snapshot()
    }

    /// Takes one frame out of `f` for the stack, or counts why not.
    fn take(&self, f: &RxFrame<'_>, out: &mut Vec<Vec<u8>>) {
        let s = &self.stats;
        match verdict(f, &self.mac, self.multicast) {
            Verdict::Accept => {
                let mut v = f.data.to_vec();
                if f.status & libc::TP_STATUS_CSUMNOTREADY != 0 && complete_l4_checksum(&mut v) {
                    s.rx_csum_filled.fetch_add(1, Ordering::Relaxed);
                }
                if v.len() > self.mtu as usize + 14 {
                    s.rx_jumbo.fetch_add(1, Ordering::Relaxed);
                }
                s.rx_frames.fetch_add(1, Ordering::Relaxed);
                s.rx_bytes.fetch_add(v.len() as u64, Ordering::Relaxed);
                out.push(v);
            }
            Verdict::Outgoing => {
                s.rx_outgoing.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Truncated => {
                s.rx_truncated.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::NotOurs => {
                s.rx_filtered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Hands the current block back and moves to the next.
    fn next_block(&self, st: &mut RxState) {
        self.ring.release(st.block);
        self.stats.rx_blocks.fetch_add(1, Ordering::Relaxed);
        st.block = (st.block + 1) % self.ring.blocks;
        st.cursor = None;
    }
}

impl AfPacketQueue {
    /// Sends the batched frames with `sendmmsg` (several calls if the kernel takes part
    /// of them). A full socket buffer drops the rest of the batch (counted); a frame the
    /// kernel refuses is counted as an error and skipped. The batch's lock is held across
    /// the calls, so that two threads flushing one queue (a squeue and the IP layer's
    /// ARP/ICMP path, or two squeues sharing a queue) cannot reorder a flow's frames.
    fn send_batch(&self) {
        let mut guard = self.tx_batch.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut *guard);
        let mut iov: Vec<libc::iovec> = batch
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; all-zero is a valid (empty) header.
        let mut msgs: Vec<libc::mmsghdr> = (0..batch.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
        }
        let mut at = 0;
        while at < msgs.len() {
            let left = &mut msgs[at..];
            // SAFETY: every header points at one iovec of `iov`, which points into a frame
            // of `batch`; all three live until after the call; the kernel only reads the
            // frames and writes the headers' `msg_len`.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    left.as_mut_ptr(),
                    left.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                let n = n as usize;
                let bytes: usize = batch[at..at + n].iter().map(Vec::len).sum();
                self.stats.tx_frames.fetch_add(n as u64, Ordering::Relaxed);
                self.stats
                    .tx_bytes
                    .fetch_add(bytes as u64, Ordering::Relaxed);
                self.stats.tx_batches.fetch_add(1, Ordering::Relaxed);
                at += n;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                    self.stats
                        .tx_dropped
                        .fetch_add((msgs.len() - at) as u64, Ordering::Relaxed);
                    return;
                }
                _ => {
                    // The first frame of the rest was refused: count it, go on.
                    self.stats.tx_errors.fetch_add(1, Ordering::Relaxed);
                    at += 1;
                }
            }
        }
        // Reuse the allocation for the next batch.
        drop(msgs);
        drop(iov);
        let mut batch = batch;
        batch.clear();
        *guard = batch;
    }
}

impl Drop for AfPacketQueue {
    fn drop(&mut self) {
        self.send_batch();
        // The notifier stops before `ring` (munmap) and `fd` (close) drop, in that order.
        self.notifier.stop();
    }
}

impl Device for AfPacketQueue {
    fn transmit(&self, frame: Vec<u8>) {
        if frame.len() < 14 || frame.len() > self.mtu as usize + 14 {
            self.stats.tx_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let full = {
            let mut b = self.tx_batch.lock().unwrap_or_else(|e| e.into_inner());
            b.push(frame);
            b.len() >= TX_BATCH
        };
        if full {
            self.send_batch();
        }
    }

    fn flush(&self) {
        self.send_batch();
    }

    fn poll_rx(&self, _now: Instant, out: &mut Vec<Vec<u8>>, budget: usize) {
        let mut st = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let mut drained = false;
        // Every frame looked at counts against the budget, wanted or not.
        let mut seen = 0;
        while seen < budget {
            let i = st.block;
            let mut cursor = match st.cursor {
                Some(c) => c,
                None => {
                    if !self.ring.owned(i) {
                        drained = true;
                        break;
                    }
                    match BlockCursor::open(self.ring.block(i)) {
                        Ok(c) => c,
                        Err(_) => {
                            self.stats.rx_corrupt.fetch_add(1, Ordering::Relaxed);
                            self.next_block(&mut st);
                            continue;
                        }
                    }
                }
            };
            // The block's slice lives only inside this statement's scope, before any
            // release below.
            let done = {
                let block = self.ring.block(i);
                match cursor.next(block) {
                    None => true,
                    Some(Err(_)) => {
                        self.stats.rx_corrupt.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                    Some(Ok(f)) => {
                        seen += 1;
                        self.take(&f, out);
                        cursor.left == 0
                    }
                }
            };
            if done {
                self.next_block(&mut st);
            } else {
                st.cursor = Some(cursor);
            }
        }
        drop(st);
        if drained {
            self.notifier.arm();
        }
    }

    fn next_rx(&self) -> Option<Instant> {
        self.notifier.next_rx()
    }

    fn set_rx_waker(&self, waker: Box<dyn Fn() + Send + Sync>) {
        self.notifier.set_waker(waker)
    }

    fn mtu(&self) -> u32 {
        self.mtu
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = AfPacketQueue::counters(self);
        vec![
            ("rx_frames", c.rx_frames),
            ("rx_bytes", c.rx_bytes),
            ("rx_jumbo", c.rx_jumbo),
            ("rx_filtered", c.rx_filtered),
            ("rx_outgoing", c.rx_outgoing),
            ("rx_truncated", c.rx_truncated),
            ("rx_corrupt", c.rx_corrupt),
            ("rx_csum_filled", c.rx_csum_filled),
            ("rx_blocks", c.rx_blocks),
            ("rx_ring_drops", c.rx_ring_drops),
            ("tx_frames", c.tx_frames),
            ("tx_bytes", c.tx_bytes),
            ("tx_dropped", c.tx_dropped),
            ("tx_errors", c.tx_errors),
            ("tx_batches", c.tx_batches),
            ("wakeups", c.wakeups),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: MacAddr = MacAddr([0x02, 0x65, 0xaf, 0, 0, 2]);

    #[test]
    fn ring_configs_are_checked() {
        assert!(RingConfig::default().validate().is_ok());
        let d = RingConfig::default();
        let bad = [
            RingConfig {
                block_size: 64 << 10,
                ..d
            },
            RingConfig {
                block_size: (256 << 10) + 100,
                ..d
            },
            RingConfig {
                block_size: 32 << 20,
                ..d
            },
            RingConfig {
                block_count: 1,
                ..d
            },
            RingConfig {
                block_count: 5000,
                ..d
            },
            RingConfig {
                block_size: 16 << 20,
                block_count: 128,
                ..d
            },
            RingConfig {
                frame_size: 64,
                ..d
            },
            RingConfig {
                frame_size: 2050,
                ..d
            },
            RingConfig {
                frame_size: 512 << 10,
                ..d
            },
            RingConfig {
                retire_timeout_ms: 0,
                ..d
            },
            RingConfig {
                retire_timeout_ms: 1001,
                ..d
            },
        ];
        for b in bad {
            let e = b.validate().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{b:?}");
            assert!(e.to_string().contains("..="), "names the range: {e}");
        }
    }

    #[test]
    fn bad_configs_are_refused_before_any_system_call() {
        let mut c = AfPacketConfig::new("lo", MAC);
        c.queues = 0;
        assert_eq!(
            AfPacket::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        c.queues = MAX_QUEUES + 1;
        assert_eq!(
            AfPacket::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        c.queues = 1;
        c.ring.retire_timeout_ms = 0;
        assert_eq!(
            AfPacket::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        c.ring = RingConfig::default();
        c.mac = MacAddr::BROADCAST;
        assert_eq!(
            AfPacket::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        c.mac = MAC;
        c.iface = "a/b".into();
        assert_eq!(
            AfPacket::open(&c).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn fanout_ids_depend_on_process_interface_and_count() {
        let a = fanout_id(100, 2, 0);
        assert_eq!(a, fanout_id(100, 2, 0));
        assert_ne!(a, fanout_id(101, 2, 0));
        assert_ne!(a, fanout_id(100, 3, 0));
        assert_ne!(a, fanout_id(100, 2, 1));
    }

    /// Where the synthetic frames put their data (as the kernel does for SOCK_RAW:
    /// after the headers, aligned).
    const MAC_OFF: usize = 82;

    /// A block as the kernel fills it: header, then frames linked by next offsets.
    fn block(size: usize, frames: &[(&[u8], u32, u32, u8)]) -> Vec<u8> {
        let mut b = vec![0u8; size];
        let put32 = |b: &mut Vec<u8>, at: usize, v: u32| {
            b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        };
        put32(&mut b, OFF_BLOCK_STATUS, libc::TP_STATUS_USER);
        put32(&mut b, OFF_NUM_PKTS, frames.len() as u32);
        put32(&mut b, OFF_FIRST_PKT, BLOCK_HDR_LEN as u32);
        let mut off = BLOCK_HDR_LEN;
        for (k, (data, wire_len, status, pkttype)) in frames.iter().enumerate() {
            let span = (MAC_OFF + data.len()).next_multiple_of(8);
            let next = if k + 1 == frames.len() { 0 } else { span };
            put32(&mut b, off + OFF_NEXT, next as u32);
            put32(&mut b, off + OFF_SNAPLEN, data.len() as u32);
            put32(&mut b, off + OFF_LEN, *wire_len);
            put32(&mut b, off + OFF_STATUS, *status);
            b[off + OFF_MAC..off + OFF_MAC + 2].copy_from_slice(&(MAC_OFF as u16).to_ne_bytes());
            b[off + OFF_PKTTYPE] = *pkttype;
            b[off + MAC_OFF..off + MAC_OFF + data.len()].copy_from_slice(data);
            off += span;
        }
        put32(&mut b, OFF_BLK_LEN, off as u32);
        b
    }

    fn walk(b: &[u8]) -> Result<Vec<RxFrame<'_>>, Corrupt> {
        let mut c = BlockCursor::open(b)?;
        let mut v = Vec::new();
        while let Some(f) = c.next(b) {
            v.push(f?);
        }
        Ok(v)
    }

    fn eth(dst: [u8; 6], n: usize) -> Vec<u8> {
        let mut f = vec![0u8; n];
        f[..6].copy_from_slice(&dst);
        f[12] = 0x08;
        for (i, b) in f[14..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    #[test]
    fn blocks_are_walked_frame_by_frame() {
        let a = eth(MAC.0, 60);
        let big = eth(MAC.0, 65_535 + 14);
        let c = eth([0xff; 6], 42);
        let b = block(
            256 << 10,
            &[
                (&a, 60, 0, libc::PACKET_HOST),
                (
                    &big,
                    65_549,
                    libc::TP_STATUS_CSUMNOTREADY,
                    libc::PACKET_HOST,
                ),
                (&c, 42, 0, libc::PACKET_BROADCAST),
            ],
        );
        let v = walk(&b).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].data, &a[..]);
        assert_eq!(v[1].data, &big[..]);
        assert_eq!(v[1].status, libc::TP_STATUS_CSUMNOTREADY);
        assert_eq!(v[2].data, &c[..]);
        assert_eq!(v[2].pkttype, libc::PACKET_BROADCAST);
        // An empty block is fine too.
        assert_eq!(walk(&block(4096, &[])).unwrap().len(), 0);
    }

    #[test]
    fn frames_are_sorted_for_ember() {
        let f = |data: &'static [u8], wire_len: u32, status: u32, pkttype: u8| RxFrame {
            data,
            wire_len,
            status,
            pkttype,
        };
        let mine: &'static [u8] = Vec::leak(eth(MAC.0, 60));
        let other: &'static [u8] = Vec::leak(eth([0x02, 0, 0, 0, 0, 9], 60));
        let bcast: &'static [u8] = Vec::leak(eth([0xff; 6], 60));
        let mcast: &'static [u8] = Vec::leak(eth([0x33, 0x33, 0, 0, 0, 1], 60));
        let h = libc::PACKET_HOST;
        assert_eq!(verdict(&f(mine, 60, 0, h), &MAC, false), Verdict::Accept);
        assert_eq!(verdict(&f(bcast, 60, 0, 1), &MAC, false), Verdict::Accept);
        assert_eq!(verdict(&f(other, 60, 0, 3), &MAC, false), Verdict::NotOurs);
        assert_eq!(verdict(&f(mcast, 60, 0, 2), &MAC, false), Verdict::NotOurs);
        assert_eq!(verdict(&f(mcast, 60, 0, 2), &MAC, true), Verdict::Accept);
        assert_eq!(
            verdict(&f(mine, 60, 0, libc::PACKET_OUTGOING), &MAC, false),
            Verdict::Outgoing
        );
        assert_eq!(
            verdict(&f(mine, 9000, 0, h), &MAC, false),
            Verdict::Truncated
        );
        assert_eq!(
            verdict(&f(&mine[..10], 10, 0, h), &MAC, false),
            Verdict::Truncated
        );
        assert_eq!(
            verdict(&f(mine, 60, libc::TP_STATUS_VLAN_VALID, h), &MAC, false),
            Verdict::NotOurs
        );
    }

    #[test]
    fn corrupt_blocks_are_rejected_not_read_past() {
        let a = eth(MAC.0, 100);
        let good = block(8192, &[(&a, 100, 0, 0), (&a, 100, 0, 0), (&a, 100, 0, 0)]);
        assert_eq!(walk(&good).unwrap().len(), 3);
        let set = |b: &mut Vec<u8>, at: usize, v: u32| {
            b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        };
        let second = BLOCK_HDR_LEN + (MAC_OFF + 100).next_multiple_of(8);
        let cases: Vec<(&str, usize, u32, Corrupt)> = vec![
            ("blk_len past the block", OFF_BLK_LEN, 8193, Corrupt::Block),
            ("blk_len huge", OFF_BLK_LEN, u32::MAX, Corrupt::Block),
            (
                "first frame inside the header",
                OFF_FIRST_PKT,
                8,
                Corrupt::Block,
            ),
            (
                "first frame past blk_len",
                OFF_FIRST_PKT,
                8000,
                Corrupt::Block,
            ),
            (
                "more frames than there are",
                OFF_NUM_PKTS,
                u32::MAX,
                Corrupt::Next,
            ),
            (
                "snaplen past the block",
                BLOCK_HDR_LEN + OFF_SNAPLEN,
                u32::MAX,
                Corrupt::FrameData,
            ),
            (
                "snaplen past blk_len",
                BLOCK_HDR_LEN + OFF_SNAPLEN,
                4000,
                Corrupt::FrameData,
            ),
            (
                "next offset of zero",
                BLOCK_HDR_LEN + OFF_NEXT,
                0,
                Corrupt::Next,
            ),
            (
                "next offset into this frame",
                BLOCK_HDR_LEN + OFF_NEXT,
                100,
                Corrupt::Next,
            ),
            (
                "next offset past the block",
                BLOCK_HDR_LEN + OFF_NEXT,
                u32::MAX,
                Corrupt::Next,
            ),
            (
                "second next offset near the end",
                second + OFF_NEXT,
                8192 - second as u32 - 10,
                Corrupt::Next,
            ),
        ];
        for (what, at, v, want) in cases {
            let mut b = good.clone();
            set(&mut b, at, v);
            assert_eq!(walk(&b).err(), Some(want), "{what}");
        }
        // tp_mac pointing into the headers, or past the block.
        for m in [0u16, 10, u16::MAX] {
            let mut b = good.clone();
            b[BLOCK_HDR_LEN + OFF_MAC..BLOCK_HDR_LEN + OFF_MAC + 2]
                .copy_from_slice(&m.to_ne_bytes());
            assert_eq!(walk(&b).err(), Some(Corrupt::FrameData), "tp_mac {m}");
        }
        // A block shorter than its header, and one whose header fits but no frame does.
        assert_eq!(BlockCursor::open(&good[..40]).err(), Some(Corrupt::Block));
        let mut b = good.clone();
        set(&mut b, OFF_BLK_LEN, (BLOCK_HDR_LEN + 30) as u32);
        assert_eq!(walk(&b).err(), Some(Corrupt::FrameHeader));
        // A cut-short slice of a good block (as if the mapping were smaller than the
        // header claims): rejected, never indexed past.
        for n in [48, 100, 200, 300, 400] {
            let _ = walk(&good[..n]);
        }
        // After an error the cursor is spent.
        let mut b = good.clone();
        set(&mut b, BLOCK_HDR_LEN + OFF_NEXT, 0);
        let mut c = BlockCursor::open(&b).unwrap();
        assert!(matches!(c.next(&b), Some(Err(Corrupt::Next))));
        assert!(c.next(&b).is_none());
    }

    #[test]
    fn every_byte_of_garbage_is_survived() {
        // Pseudo-random blocks with plausible headers: the walk ends, never panics.
        let mut x: u64 = 0x1234_5678_9abc_def0;
        for _ in 0..2000 {
            let mut b = vec![0u8; 4096];
            for w in b.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                w.copy_from_slice(&x.to_ne_bytes()[..w.len()]);
            }
            b[OFF_NUM_PKTS..OFF_NUM_PKTS + 4].copy_from_slice(&((x % 50) as u32).to_ne_bytes());
            b[OFF_FIRST_PKT..OFF_FIRST_PKT + 4].copy_from_slice(&48u32.to_ne_bytes());
            b[OFF_BLK_LEN..OFF_BLK_LEN + 4]
                .copy_from_slice(&((x >> 20) as u32 % 5000).to_ne_bytes());
            if let Ok(mut c) = BlockCursor::open(&b) {
                let mut n = 0;
                while let Some(r) = c.next(&b) {
                    if let Ok(f) = r {
                        assert!(f.data.len() <= b.len());
                    }
                    n += 1;
                    assert!(n <= 50);
                }
            }
        }
    }

    #[test]
    fn partial_checksums_are_completed() {
        // A TCP/IPv4 frame with a correct checksum, then with the pseudo-header sum only
        // (what checksum offload leaves).
        let payload = 1001usize;
        let total = 20 + 20 + payload;
        let mut f = vec![0u8; 14 + total];
        f[12] = 0x08;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[198, 18, 6, 1]);
        f[30..34].copy_from_slice(&[198, 18, 6, 2]);
        f[46] = 5 << 4;
        for (i, b) in f[54..].iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let src = std::net::Ipv4Addr::new(198, 18, 6, 1);
        let dst = std::net::Ipv4Addr::new(198, 18, 6, 2);
        let ph = checksum::pseudo_header(src, dst, 6, (20 + payload) as u16);
        let c = checksum::finish(checksum::combine(ph, checksum::sum(&f[34..])));
        let mut good = f.clone();
        good[50..52].copy_from_slice(&c.to_be_bytes());
        let mut partial = f.clone();
        partial[50..52].copy_from_slice(&(!checksum::finish(ph)).to_be_bytes());
        // Ethernet padding after the IP packet is not summed.
        partial.extend_from_slice(&[0xaa; 6]);
        assert!(complete_l4_checksum(&mut partial));
        assert_eq!(&partial[..good.len()], &good[..]);
        // Not IPv4 TCP/UDP, a fragment, or a total length past the frame: left alone.
        let mut arp = good.clone();
        arp[13] = 0x06;
        assert!(!complete_l4_checksum(&mut arp));
        let mut frag = good.clone();
        frag[20] = 0x20;
        assert!(!complete_l4_checksum(&mut frag));
        let mut long = good.clone();
        long[16..18].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(!complete_l4_checksum(&mut long));
        assert!(!complete_l4_checksum(&mut good[..30]));
    }
}
