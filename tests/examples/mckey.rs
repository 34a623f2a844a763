//! mckey (rdma-core's `mckey`) with data: every member joins one multicast group from a UD
//! id, and after mckey's 3 s pause the sender sends `-C` messages of `-S` bytes to the group,
//! which every receiver counts. The protocol is `cmtwin_tests::ports::mckey`,
//! wire-compatible with the C `mckey`.
//!
//! * `cargo run -p cmtwin-tests --example mckey [seed]`: on the simulator, a sender and two
//!   receivers on three hosts (10 messages of 100 bytes), then a sender and one receiver; each
//!   run twice to check that the seed replays the same trace, with every member's virtual
//!   times checked exactly. `-C`, `-S` change the exchange, `-o` makes the sender a send-only
//!   member, `-l` blocks the members' own multicast loopback. `CMTWIN_TRACE=1` prints the first trace. With `CMTWIN_RDMA_ADDR=<ip of an RDMA
//!   interface>`, a receiver and a sender on the real librdmacm instead, on two threads.
//! * `... --example mckey -- -m <group ip> [-b <local ip>] [-s] [-C count] [-S size] [-o]
//!   [-l]`: one member on the real librdmacm and libibverbs, with mckey's flags (`-s` sender,
//!   else receiver; `-o` a send-only join; `-l` a QP made with
//!   `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`, which rxe refuses), against this example or the C
//!   `mckey`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::MULTICAST_QPN;
use cmtwin::RDMA_UDP_QKEY;
use cmtwin_sim::SimConfig;
use cmtwin_tests::ports::command_line::exit_unless_ud_available;
use cmtwin_tests::ports::mckey::{self, Options, Role, Summary};
use cmtwin_tests::ports::simulated::{self, GroupProcess};
use cmtwin_verbs::VerbsBackend;

/// The group the simulated members join.
const GROUP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 1, 2, 3)), 0);
/// The sender's host and the receivers' hosts on the simulator.
const HOSTS: [(&str, [u8; 4]); 3] = [
    ("sender", [10, 0, 0, 1]),
    ("receiver-a", [10, 0, 0, 2]),
    ("receiver-b", [10, 0, 0, 3]),
];
/// The simulated wire's one-way latency (the default; its jitter is set to zero so that every
/// datagram takes exactly this long and every time below is exact).
const WIRE: Duration = Duration::from_micros(5);

/// Where to run, from the command line.
enum Mode {
    /// On the simulator with this seed.
    Simulated(u64),
    /// One member on librdmacm: its role, local address and group.
    Real(Role, Option<SocketAddr>, SocketAddr),
    /// A receiver and a sender on librdmacm, on two threads, from this local address.
    Both(SocketAddr),
}

/// The group of [`Mode::Both`].
const REAL_GROUP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 1, 77, 3)), 0);

fn parse_ip(s: &str) -> Result<SocketAddr, String> {
    let ip: IpAddr = s.parse().map_err(|_| format!("{s:?} is no IP address"))?;
    Ok(SocketAddr::new(ip, 0))
}

fn parse_args() -> Result<(Mode, Options), String> {
    let mut args = std::env::args().skip(1);
    let (mut seed, mut group, mut local, mut role) = (1, None, None, Role::Receiver);
    let mut opts = Options::default();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "-m" => group = Some(parse_ip(&value("-m")?)?),
            "-b" => local = Some(parse_ip(&value("-b")?)?),
            "-s" => role = Role::Sender,
            "-o" => opts.send_only = true,
            "-l" => opts.block_self_loopback = true,
            "-C" => opts.message_count = value("-C")?.parse().map_err(|e| format!("-C: {e}"))?,
            "-S" => opts.message_size = value("-S")?.parse().map_err(|e| format!("-S: {e}"))?,
            other => seed = other.parse().map_err(|e| format!("{other}: {e}"))?,
        }
    }
    let mode = match group {
        Some(group) => Mode::Real(role, local, group),
        None if local.is_some() || role == Role::Sender => {
            return Err("-b and -s need -m <group>".to_string())
        }
        None => match std::env::var("CMTWIN_RDMA_ADDR") {
            Ok(ip) => Mode::Both(parse_ip(&ip)?),
            Err(_) => Mode::Simulated(seed),
        },
    };
    Ok((mode, opts))
}

/// The sender and `receivers` receivers on hosts of their own, twice: every member's
/// summary must be exact and the traces equal.
fn simulated(seed: u64, receivers: usize, opts: Options) -> Result<(), String> {
    let run = || {
        let processes = HOSTS[..=receivers]
            .iter()
            .enumerate()
            .map(|(i, &(host, ip))| {
                // `-o` makes the sender a send-only member; receivers must receive.
                let (role, opts) = if i == 0 {
                    (Role::Sender, opts)
                } else {
                    let full = Options {
                        send_only: false,
                        ..opts
                    };
                    (Role::Receiver, full)
                };
                GroupProcess {
                    host,
                    ip: IpAddr::from(ip),
                    body: Box::new(move |cm: &cmtwin_sim::SimBackend, ip| {
                        mckey::member(cm, role, Some(SocketAddr::new(ip, 0)), GROUP, &opts)
                    }),
                }
            })
            .collect();
        let exact = SimConfig {
            wire_latency: WIRE,
            wire_jitter: Duration::ZERO,
            ..SimConfig::default()
        };
        simulated::run_group(seed, |b| b.config(exact), |_| Ok(()), processes)
    };
    let first = run()?;
    if std::env::var_os("CMTWIN_TRACE").is_some() {
        println!("--- trace (seed {seed}) ---\n{}", first.trace);
    }
    first.outcome.clone()?;
    let members: Vec<&Summary> = first.results.iter().flatten().collect();
    if members.len() != receivers + 1 {
        return Err(format!(
            "{} of {} members returned",
            members.len(),
            receivers + 1
        ));
    }
    check(&members, &opts)?;
    let second = run()?;
    if second.trace != first.trace || second.end != first.end {
        return Err(format!("seed {seed} did not replay the same trace"));
    }
    let sender = members[0];
    println!(
        "simulator (seed {seed}): {receivers} receiver(s) each got the sender's {} datagrams \
         of {} bytes {:?} after its join at {:?}; ended at {:?}; the seed replays the same \
         trace",
        opts.messages(),
        opts.message_size,
        members[1].finished - sender.joined,
        sender.joined,
        first.end
    );
    Ok(())
}

/// Checks the members' summaries (the sender first) against what the simulated exchange
/// must give: one join time for all (the joins start together and take no time on RoCE);
/// the sender's sends posted after the 3 s pause and its last one complete at once; every
/// datagram at every receiver one wire latency later, from the sender's QP. Without
/// messages, a receiver is done when it has joined.
fn check(members: &[&Summary], opts: &Options) -> Result<(), String> {
    let n = opts.messages();
    let sender = members[0];
    let sent_at = sender.joined + opts.settle;
    let (sources, received_at) = if n == 0 {
        (Vec::new(), sender.joined)
    } else {
        (vec![(sender.qpn, n)], sent_at + WIRE)
    };
    for (i, m) in members.iter().enumerate() {
        let want = if i == 0 {
            Summary {
                sent: n,
                received: 0,
                sources: Vec::new(),
                finished: sent_at,
                ..(*m).clone()
            }
        } else {
            Summary {
                sent: 0,
                received: n,
                sources: sources.clone(),
                finished: received_at,
                ..(*m).clone()
            }
        };
        let group_ok = m.group.qp_num == MULTICAST_QPN && m.group.qkey == RDMA_UDP_QKEY;
        if **m != want || m.joined != sender.joined || !group_ok {
            return Err(format!(
                "member {i}: {m:?}, not {want:?} joined with the sender"
            ));
        }
    }
    Ok(())
}

/// One member on the real backend.
fn real(
    role: Role,
    local: Option<SocketAddr>,
    group: SocketAddr,
    opts: &Options,
) -> Result<(), String> {
    println!("mckey: starting {role:?} for {}", group.ip());
    let s =
        mckey::member(&VerbsBackend::new(), role, local, group, opts).map_err(|e| e.to_string())?;
    println!(
        "mckey: joined dgid {} (qpn {:#x}, qkey {:#x}); sent {}, received {} from {:?}",
        std::net::Ipv6Addr::from(s.group.ah_attr.grh.dgid),
        s.qpn,
        s.group.qkey,
        s.sent,
        s.received,
        s.sources
    );
    if role == Role::Receiver && s.received != opts.messages() {
        return Err(format!("{} of {} messages", s.received, opts.messages()));
    }
    println!("data transfers complete");
    Ok(())
}

/// A receiver on a thread and a sender, both on the real backend at `local`: the receiver
/// must take every message.
fn both(local: SocketAddr, opts: Options) -> Result<(), String> {
    let receiver = std::thread::spawn(move || {
        let cm = VerbsBackend::new();
        mckey::member(&cm, Role::Receiver, Some(local), REAL_GROUP, &opts)
    });
    // The receiver's receives are posted before its join; the sender pauses 3 s after its own.
    std::thread::sleep(Duration::from_millis(500));
    let cm = VerbsBackend::new();
    let sender = mckey::member(&cm, Role::Sender, Some(local), REAL_GROUP, &opts)
        .map_err(|e| format!("sender: {e}"))?;
    let receiver = receiver
        .join()
        .map_err(|_| "the receiver thread panicked".to_string())?
        .map_err(|e| format!("receiver: {e}"))?;
    let n = opts.messages();
    if receiver.sources != [(sender.qpn, n)] {
        return Err(format!(
            "receiver {receiver:?} did not take the sender's {n}"
        ));
    }
    println!(
        "librdmacm on {}: {n} datagrams to {}",
        local.ip(),
        REAL_GROUP.ip()
    );
    Ok(())
}

fn main() {
    let outcome = parse_args().and_then(|(mode, opts)| {
        if !matches!(mode, Mode::Simulated(_)) {
            exit_unless_ud_available();
        }
        match mode {
            Mode::Simulated(seed) => {
                simulated(seed, 2, opts)?;
                simulated(seed, 1, opts)
            }
            Mode::Real(role, local, group) => real(role, local, group, &opts),
            Mode::Both(local) => both(local, opts),
        }
    });
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
}
