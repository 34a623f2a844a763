//! A guide: write protocol code once, test it on the simulator with faults and seeds, run it
//! on Soft-RoCE and on RDMA hardware.
//!
//! # 1. Protocol code, generic over the backend
//!
//! Code written against [`CmBackend`](crate::CmBackend) runs on every backend: the simulated
//! fabric of `cmtwin-sim` and the real librdmacm of `cmtwin-verbs`. Its calls are
//! librdmacm's, one method each, with the same names (`rdma_connect` is `connect`), the same
//! events and the same errnos; [`expect_event`](crate::expect_event) is the
//! fetch/check/acknowledge step every such program needs.
//!
//! ```
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use cmtwin::{expect_event, CmBackend, ConnParam, EventKind, ExpectError, PortSpace};
//! use cmtwin::{QpInitAttr, QpType, Wait};
//!
//! const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));
//!
//! /// Accepts one connection and returns the first five bytes the client sent.
//! pub fn serve_one<B: CmBackend>(cm: &B, addr: SocketAddr) -> Result<Vec<u8>, ExpectError> {
//!     let ch = cm.create_event_channel()?;
//!     let listener = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//!     cm.bind_addr(listener, addr)?;
//!     cm.listen(listener, 8)?;
//!     let request = expect_event(cm, ch, EventKind::ConnectRequest, WAIT)?;
//!     let conn = request.id; // the request's new id
//!     cm.create_qp(conn, &QpInitAttr::new(QpType::Rc))?;
//!     cm.accept(conn, Some(&ConnParam::default()))?;
//!     expect_event(cm, ch, EventKind::Established, WAIT)?;
//!     expect_event(cm, ch, EventKind::Disconnected, WAIT)?;
//!     cm.disconnect(conn)?;
//!     cm.destroy_id(conn)?;
//!     cm.destroy_id(listener)?;
//!     cm.destroy_event_channel(ch)?;
//!     // On IB and RoCE the data arrives zero-padded to 56 bytes (CM-SEMANTICS §6.2).
//!     Ok(request.private_data[..5].to_vec())
//! }
//!
//! /// Connects to `server` saying "hello", then disconnects.
//! pub fn greet<B: CmBackend>(cm: &B, server: SocketAddr) -> Result<(), ExpectError> {
//!     let ch = cm.create_event_channel()?;
//!     let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//!     cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
//!     expect_event(cm, ch, EventKind::AddrResolved, WAIT)?;
//!     cm.resolve_route(id, Duration::from_secs(2))?;
//!     expect_event(cm, ch, EventKind::RouteResolved, WAIT)?;
//!     cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
//!     cm.connect(id, Some(&ConnParam::with_private_data(b"hello")))?;
//!     expect_event(cm, ch, EventKind::Established, WAIT)?;
//!     cm.disconnect(id)?;
//!     expect_event(cm, ch, EventKind::Disconnected, WAIT)?;
//!     cm.destroy_id(id)?;
//!     cm.destroy_event_channel(ch)?;
//!     Ok(())
//! }
//! ```
//!
//! Rules that keep such code portable:
//!
//! * Every fetched event is acknowledged once: by `ack_cm_event` (which reports errors), or
//!   by dropping it. An unacknowledged event makes `destroy_id` of its id fail with EBUSY,
//!   where librdmacm would block forever.
//! * Wait with a bound (`Wait::Timeout`) and let errors name the call: every
//!   [`CmError`](crate::CmError) says which call failed and with which errno, and the same
//!   misuse gives the same errno on both backends (the trait's docs list them per method).
//! * Take time from the backend (`now`, `sleep`), never from the OS: on the simulator it is
//!   virtual.
//! * A program with several channels waits on all of them with
//!   [`get_cm_event_any`](crate::CmBackend::get_cm_event_any) (or asks which are ready with
//!   [`poll_channels`](crate::CmBackend::poll_channels)); one that serves many connections
//!   routes events by the id's context with a [`Dispatcher`](crate::Dispatcher). An event
//!   loop that also waits for completions and asynchronous events (as C polls the CM
//!   channel's, the completion channel's and the device's fds together) asks which are ready
//!   with [`poll_sources`](crate::verbs::DataPath::poll_sources).
//!
//! # 2. Test it on the simulator
//!
//! `cmtwin-sim` builds a fabric of hosts from a seed. Each host's backend is a `CmBackend`;
//! processes spawned on hosts run one at a time in virtual time, so a run is deterministic:
//! the same seed and code give the same trace, byte for byte, and exact times can be
//! asserted.
//!
//! ```
//! # use std::net::SocketAddr;
//! # use std::time::Duration;
//! # use cmtwin::{expect_event, CmBackend, ConnParam, EventKind, ExpectError, PortSpace};
//! # use cmtwin::{QpInitAttr, QpType, Wait};
//! # const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));
//! # pub fn serve_one<B: CmBackend>(cm: &B, addr: SocketAddr) -> Result<Vec<u8>, ExpectError> {
//! #     let ch = cm.create_event_channel()?;
//! #     let listener = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//! #     cm.bind_addr(listener, addr)?;
//! #     cm.listen(listener, 8)?;
//! #     let request = expect_event(cm, ch, EventKind::ConnectRequest, WAIT)?;
//! #     let conn = request.id;
//! #     cm.create_qp(conn, &QpInitAttr::new(QpType::Rc))?;
//! #     cm.accept(conn, Some(&ConnParam::default()))?;
//! #     expect_event(cm, ch, EventKind::Established, WAIT)?;
//! #     expect_event(cm, ch, EventKind::Disconnected, WAIT)?;
//! #     cm.disconnect(conn)?;
//! #     cm.destroy_id(conn)?;
//! #     cm.destroy_id(listener)?;
//! #     cm.destroy_event_channel(ch)?;
//! #     Ok(request.private_data[..5].to_vec())
//! # }
//! # pub fn greet<B: CmBackend>(cm: &B, server: SocketAddr) -> Result<(), ExpectError> {
//! #     let ch = cm.create_event_channel()?;
//! #     let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//! #     cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
//! #     expect_event(cm, ch, EventKind::AddrResolved, WAIT)?;
//! #     cm.resolve_route(id, Duration::from_secs(2))?;
//! #     expect_event(cm, ch, EventKind::RouteResolved, WAIT)?;
//! #     cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
//! #     cm.connect(id, Some(&ConnParam::with_private_data(b"hello")))?;
//! #     expect_event(cm, ch, EventKind::Established, WAIT)?;
//! #     cm.disconnect(id)?;
//! #     expect_event(cm, ch, EventKind::Disconnected, WAIT)?;
//! #     cm.destroy_id(id)?;
//! #     cm.destroy_event_channel(ch)?;
//! #     Ok(())
//! # }
//! use std::sync::{Arc, Mutex};
//! use cmtwin::Transport;
//! use cmtwin_sim::Fabric;
//!
//! /// Runs the exchange on a fresh two-host RoCE fabric from `seed`; returns what the server
//! /// heard, when the client finished (virtual time), and the trace.
//! fn exchange(seed: u64) -> (Vec<u8>, Duration, String) {
//!     let server_ip = "10.0.0.1".parse().unwrap();
//!     let fabric = Fabric::builder(seed)
//!         .host("server", Transport::Roce, &[server_ip])
//!         .host("client", Transport::Roce, &["10.0.0.2".parse().unwrap()])
//!         .build()
//!         .expect("a valid fabric");
//!     let addr = SocketAddr::new(server_ip, 7471);
//!     let heard = Arc::new(Mutex::new(Vec::new()));
//!     let done_at = Arc::new(Mutex::new(Duration::ZERO));
//!     let h = heard.clone();
//!     fabric.spawn("server", "server", move |cm| {
//!         *h.lock().unwrap() = serve_one(&cm, addr).expect("served");
//!         Ok(())
//!     });
//!     let d = done_at.clone();
//!     fabric.spawn("client", "client", move |cm| {
//!         cm.sleep(Duration::from_millis(1))?; // the server listens first
//!         greet(&cm, addr).expect("greeted");
//!         *d.lock().unwrap() = cm.now();
//!         Ok(())
//!     });
//!     fabric.run().expect("both processes succeed");
//!     let heard = heard.lock().unwrap().clone();
//!     let done_at = *done_at.lock().unwrap();
//!     (heard, done_at, fabric.trace_text())
//! }
//!
//! let (heard, done_at, trace) = exchange(7);
//! assert_eq!(heard, b"hello");
//! assert!(done_at > Duration::from_millis(1), "virtual time advanced: {done_at:?}");
//! assert!(trace.contains("REQ"), "the trace shows the CM's messages");
//! assert_eq!(exchange(7), (heard, done_at, trace), "same seed, same run");
//! ```
//!
//! The trace (`Fabric::trace_text`) lists every call with its result, every event queued,
//! delivered and acknowledged, and every CM message on the wire, with virtual time and
//! host; a failed run names the line that replays it (`CMTWIN_SEED=<seed> cargo test`).
//!
//! # 3. Faults and seeds
//!
//! The simulator produces what real fabrics rarely show on demand: lost and delayed CM
//! messages (`Fabric::drop_next`, `Fabric::delay_next`, `SimConfig::loss_probability`),
//! device removal, address change, lost multicast groups, unreachable peers. The kernel's
//! reactions follow CM-SEMANTICS (retransmissions after the REQ timeout, REJ reasons,
//! timewait). Losing the server's REP, for instance, costs the client one retransmission
//! interval of the server, and the connection still comes up:
//!
//! ```
//! # use std::net::SocketAddr;
//! # use std::time::Duration;
//! # use cmtwin::{expect_event, CmBackend, ConnParam, EventKind, ExpectError, PortSpace};
//! # use cmtwin::{QpInitAttr, QpType, Wait};
//! # const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));
//! # pub fn serve_one<B: CmBackend>(cm: &B, addr: SocketAddr) -> Result<Vec<u8>, ExpectError> {
//! #     let ch = cm.create_event_channel()?;
//! #     let listener = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//! #     cm.bind_addr(listener, addr)?;
//! #     cm.listen(listener, 8)?;
//! #     let request = expect_event(cm, ch, EventKind::ConnectRequest, WAIT)?;
//! #     let conn = request.id;
//! #     cm.create_qp(conn, &QpInitAttr::new(QpType::Rc))?;
//! #     cm.accept(conn, Some(&ConnParam::default()))?;
//! #     expect_event(cm, ch, EventKind::Established, WAIT)?;
//! #     expect_event(cm, ch, EventKind::Disconnected, WAIT)?;
//! #     cm.disconnect(conn)?;
//! #     cm.destroy_id(conn)?;
//! #     cm.destroy_id(listener)?;
//! #     cm.destroy_event_channel(ch)?;
//! #     Ok(request.private_data[..5].to_vec())
//! # }
//! # pub fn greet<B: CmBackend>(cm: &B, server: SocketAddr) -> Result<(), ExpectError> {
//! #     let ch = cm.create_event_channel()?;
//! #     let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//! #     cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
//! #     expect_event(cm, ch, EventKind::AddrResolved, WAIT)?;
//! #     cm.resolve_route(id, Duration::from_secs(2))?;
//! #     expect_event(cm, ch, EventKind::RouteResolved, WAIT)?;
//! #     cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
//! #     cm.connect(id, Some(&ConnParam::with_private_data(b"hello")))?;
//! #     expect_event(cm, ch, EventKind::Established, WAIT)?;
//! #     cm.disconnect(id)?;
//! #     expect_event(cm, ch, EventKind::Disconnected, WAIT)?;
//! #     cm.destroy_id(id)?;
//! #     cm.destroy_event_channel(ch)?;
//! #     Ok(())
//! # }
//! use cmtwin::Transport;
//! use cmtwin_sim::{Fabric, MessageKind, SimConfig};
//!
//! /// Runs the exchange on a fabric from `seed` with `config`, losing the first `lost_reps`
//! /// REPs; returns whether it succeeded and the trace.
//! fn exchange_with(seed: u64, config: SimConfig, lost_reps: u32) -> (bool, String) {
//!     let server_ip = "10.0.0.1".parse().unwrap();
//!     let fabric = Fabric::builder(seed)
//!         .config(config)
//!         .host("server", Transport::Roce, &[server_ip])
//!         .host("client", Transport::Roce, &["10.0.0.2".parse().unwrap()])
//!         .build()
//!         .expect("a valid fabric");
//!     if lost_reps > 0 {
//!         fabric.drop_next(MessageKind::Rep, lost_reps).expect("not running yet");
//!     }
//!     let addr = SocketAddr::new(server_ip, 7471);
//!     fabric.spawn("server", "server", move |cm| {
//!         serve_one(&cm, addr).map(drop).map_err(|e| match e {
//!             ExpectError::Cm(e) => e,
//!             other => panic!("{other}"),
//!         })
//!     });
//!     fabric.spawn("client", "client", move |cm| {
//!         cm.sleep(Duration::from_millis(1))?;
//!         greet(&cm, addr).map_err(|e| match e {
//!             ExpectError::Cm(e) => e,
//!             other => panic!("{other}"),
//!         })
//!     });
//!     let ok = fabric.run().is_ok();
//!     (ok, fabric.trace_text())
//! }
//!
//! let (ok, trace) = exchange_with(1, SimConfig::default(), 1);
//! assert!(ok, "one lost REP is retransmitted:\n{trace}");
//! assert!(trace.contains("REP") && trace.contains("targeted fault"), "{trace}");
//!
//! // Random loss: every seed is a different run, and each replays exactly.
//! let lossy = SimConfig {
//!     loss_probability: 0.2,
//!     ..SimConfig::default()
//! };
//! for seed in 0..4 {
//!     let first = exchange_with(seed, lossy.clone(), 0);
//!     assert_eq!(first, exchange_with(seed, lossy.clone(), 0), "seed {seed} replays");
//! }
//! ```
//!
//! The project's own conformance suite (crate `cmtwin-tests`) is written this way: each
//! scenario is generic over a test bed and runs on simulated RoCE, InfiniBand and iWARP
//! fabrics and, unchanged, on the real librdmacm.
//!
//! # 4. Run it on Soft-RoCE
//!
//! Soft-RoCE (`rdma_rxe`) turns any Ethernet interface into an RDMA device:
//!
//! ```text
//! modprobe rdma_rxe
//! rdma link add rxe0 type rxe netdev eth0      # as root
//! rdma link show                               # rxe0/1 state ACTIVE
//! ```
//!
//! Then the same functions run on `cmtwin_verbs::VerbsBackend`, with OS threads instead of
//! simulated processes (addresses are the interface's):
//!
//! ```no_run
//! # use std::net::SocketAddr;
//! # use std::time::Duration;
//! # use cmtwin::{CmBackend, ExpectError};
//! # pub fn serve_one<B: CmBackend>(cm: &B, addr: SocketAddr) -> Result<Vec<u8>, ExpectError> {
//! #     unimplemented!()
//! # }
//! # pub fn greet<B: CmBackend>(cm: &B, server: SocketAddr) -> Result<(), ExpectError> {
//! #     unimplemented!()
//! # }
//! use cmtwin_verbs::VerbsBackend;
//!
//! let addr: SocketAddr = "192.168.77.1:7471".parse().unwrap();
//! let server = std::thread::spawn(move || serve_one(&VerbsBackend::new(), addr));
//! std::thread::sleep(Duration::from_millis(100)); // the server listens first
//! greet(&VerbsBackend::new(), addr).expect("greeted");
//! assert_eq!(server.join().unwrap().expect("served"), b"hello");
//! ```
//!
//! Without a machine to spare, `scripts/vm-run -- COMMAND` runs a command in a QEMU VM with
//! Soft-RoCE on a dummy interface (192.168.77.1), and `scripts/verbs-tests-in-vm` runs the
//! real-backend tests and the conformance suite there, also under valgrind.
//!
//! # 5. Run it on RDMA hardware
//!
//! Nothing changes in the code: `VerbsBackend` uses whatever device owns the address (mlx5,
//! irdma, efa's CM-capable devices...). What differs is the fabric, and the simulator models
//! those differences so that they are tested before they are met:
//!
//! * InfiniBand resolves routes and multicast groups through the subnet manager (SA queries
//!   take time; `Transport::InfiniBand` on the simulator), and its private-data sizes are
//!   those of RoCE.
//! * iWARP has no timewait, no QP-less connections (an id without QP names a QP made apart
//!   in `qp_num`, and the iWARP CM moves that QP itself), exact-length private data and
//!   ECONNREFUSED instead of REJ reason 28 (`Transport::Iwarp`).
//! * Timeouts follow the path's packet life time: REQ retransmissions every few seconds,
//!   UNREACHABLE after about a hundred seconds with the default 15 retries.
//!
//! Run the real-backend tests on such a machine with the interface's address:
//! `CMTWIN_RDMA_ADDR=<ip> cargo test -p cmtwin-verbs -p cmtwin-tests -- --ignored
//! --test-threads=1`.
//!
//! # 6. Threads, and async
//!
//! Real RDMA programs run a CM thread that hands ids to worker threads. Write them with
//! [`crate::thread::spawn`] and the primitives of [`crate::sync`] (mutex, condition variable,
//! semaphore, channel): on the simulator each thread is a simulated process of the host,
//! scheduled by the fabric's seeded scheduler, and a deadlock is reported naming who waits for
//! what and who holds it; on the real backend they are OS threads and std's primitives. A sweep
//! of seeds draws a schedule per seed (random or PCT choice, preemption at every call, wake-up
//! latency), so races between threads show without a hand-inserted sleep (the bug zoo's
//! `rping -P` port is caught that way in most seeds).
//!
//! Or write the protocol with `async`/`await`: [`crate::task::CmAsync`] awaits events and
//! sleeps, and [`crate::task::Executor`] runs many connections as tasks of one thread, waiting
//! through the backend (virtual time on the simulator, `poll(2)` on the channel fds on
//! librdmacm):
//!
//! ```
//! use std::time::Duration;
//! use cmtwin::task::{block_on, CmAsync};
//! use cmtwin::{CmBackend, EventKind, PortSpace};
//!
//! /// Resolves `server`'s address and route, awaiting each event.
//! async fn resolve<B: CmBackend>(cm: &B, server: std::net::SocketAddr) -> cmtwin::Result<()> {
//!     let ch = cm.create_event_channel()?;
//!     let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//!     cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
//!     cm.expect(ch, EventKind::AddrResolved).await?;
//!     cm.resolve_route(id, Duration::from_secs(2))?;
//!     cm.expect(ch, EventKind::RouteResolved).await?;
//!     cm.destroy_id(id)?;
//!     cm.destroy_event_channel(ch)
//! }
//!
//! let fabric = cmtwin_sim::Fabric::builder(1)
//!     .host("a", cmtwin::Transport::Roce, &["10.0.0.1".parse()?])
//!     .host("b", cmtwin::Transport::Roce, &["10.0.0.2".parse()?])
//!     .build()?;
//! let cm = fabric.backend("a");
//! block_on(&cm, resolve(&cm, "10.0.0.2:7471".parse()?))??;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The examples `thread_per_connection` and `pingpong_async` (`tests/examples/`) run both
//! forms on the simulator and, with `CMTWIN_RDMA_ADDR`, on librdmacm.
//!
//! # 7. Porting programs written with `rdma_getaddrinfo` and `rdma_create_ep`
//!
//! rdma-core's `rdma_server`/`rdma_client` style (synchronous ids, librdmacm's verbs helpers)
//! ports call for call: [`create_ep`](crate::CmBackend::create_ep) and
//! [`destroy_ep`](crate::CmBackend::destroy_ep) are `rdma_create_ep` (with a NULL PD: the
//! device's default one, and CQs librdmacm makes) and `rdma_destroy_ep`, and `get_request` on
//! a passive endpoint made with QP attributes gives the new id its QP. `rdma_create_ep` with a
//! PD and attributes naming the program's own CQs (and SRQ) is
//! [`create_ep_ex`](crate::verbs::DataPath::create_ep_ex) with a
//! [`QpInitAttrEx`](crate::verbs::QpInitAttrEx) (the PD and CQs made through an id bound to
//! the device beforehand; a passive endpoint gives every new id a QP in that PD completing
//! into those CQs). `rdma_getaddrinfo` is
//! [`getaddrinfo`](crate::CmBackend::getaddrinfo) (node and service as strings, as in C); an
//! active result carries only the destination (`src_addr` is `None`, as librdmacm leaves it).
//! An active `rdma_create_ep` writes the address info's QP type and the capacities granted
//! back into the attributes it was given (`&mut`), as C's does: `rdma_client`'s check of
//! `attr.cap.max_inline_data` reads them there (`rdma_server`'s `ibv_query_qp` is
//! [`query_qp_cap`](crate::verbs::DataPath::query_qp_cap) on the id's
//! [`qp`](crate::verbs::DataPath::qp)). `QpInitAttr::new` is not a zeroed struct: it has
//! small queues and **signals every send** (`sq_sig_all` true), where a C program that
//! `memset`s its `ibv_qp_init_attr` gets `sq_sig_all` 0; set every field a C `memset` would
//! have zeroed, `sq_sig_all = false` first. A call of a synchronous id (`rdma_connect`, `rdma_accept`,
//! `rdma_disconnect`, ...) returns once its event came, with that event's errno (ECONNREFUSED
//! for REJECTED); the event stays the id's current one
//! ([`sync_event`](crate::CmBackend::sync_event), C's `id->event`), e.g. the private data of
//! the server's accept. rsockets
//! (`rs_socket`, `rs_sendto`, ..., which rdma-core's `udpong`, `rstream` and `riostream`
//! use) are not offered: such a program ports to UD endpoints made the same way (a QP of
//! `QpType::Ud` in `RDMA_PS_UDP`, `connect` for the server's QP number and address
//! handle, [`post_ud_send`](crate::verbs::DataPath::post_ud_send) and receives with room for
//! the 40-byte GRH). Deregister a region only once nothing posted uses it (after its
//! completions were polled, or after `destroy_ep` destroyed the QP): librdmacm lets
//! `rdma_dereg_mr` free memory a posted receive still names, cmtwin answers EBUSY. The
//! simulator lets a region go as soon as its completions are queued, cmtwin-verbs only once
//! they are polled: after a refused `connect`, whose flushed receive nobody polls, destroy the
//! endpoint before deregistering its regions, not in C's order.
//!
//! `rdma_post_send`, `rdma_post_ud_send`, `rdma_post_read` and `rdma_post_write` are
//! [`post_send_msg`](crate::verbs::DataPath::post_send_msg),
//! [`post_ud_send`](crate::verbs::DataPath::post_ud_send),
//! [`post_read`](crate::verbs::DataPath::post_read) and
//! [`post_write`](crate::verbs::DataPath::post_write), with C's `flags` as a
//! [`SendFlags`](crate::verbs::SendFlags) in the same place: `SendFlags::NONE` is C's 0 (on a
//! QP without `sq_sig_all`, no completion when it succeeds), `SIGNALED`, `SOLICITED`, `FENCE`
//! and `INLINE` (the region's bytes copied at post time, up to the granted
//! `max_inline_data`). C's inline posts from memory that is not registered (`mr` NULL with
//! `IBV_SEND_INLINE`) take the bytes themselves:
//! [`post_send_inline`](crate::verbs::DataPath::post_send_inline),
//! [`post_ud_send_inline`](crate::verbs::DataPath::post_ud_send_inline) and
//! [`post_write_inline`](crate::verbs::DataPath::post_write_inline). The vectored
//! `rdma_post_recvv`, `rdma_post_sendv`, `rdma_post_readv` and `rdma_post_writev` are
//! [`post_recvv`](crate::verbs::DataPath::post_recvv),
//! [`post_sendv`](crate::verbs::DataPath::post_sendv),
//! [`post_readv`](crate::verbs::DataPath::post_readv) and
//! [`post_writev`](crate::verbs::DataPath::post_writev), over a slice of
//! [`Sge`](crate::verbs::Sge) made with [`MemoryRegion::sge`](crate::verbs::MemoryRegion::sge)
//! (no entry is a message of no bytes; more than the QP's granted `max_send_sge` or
//! `max_recv_sge` is EINVAL; `IBV_SEND_INLINE` copies the entries' bytes when posted). Both
//! sides of rdma-core's pair, each in its own simulated process (their calls
//! block; the example `rdma_server_client` in `tests/examples/` is the whole port, with
//! inline sends, `rdma_xserver`/`rdma_xclient` and runs against the C tools):
//!
//! ```
//! use std::time::Duration;
//! use cmtwin::verbs::{DataPath, SendFlags};
//! use cmtwin::{rai, AddrInfoHints, CmBackend, PortSpace, QpInitAttr, QpType};
//!
//! fn server<B: DataPath>(cm: &B) -> cmtwin::Result<Vec<u8>> {
//!     let hints = AddrInfoHints::new(rai::PASSIVE).with_port_space(PortSpace::TCP);
//!     let res = cm.getaddrinfo(None, Some("7471"), Some(&hints))?.remove(0);
//!     let listen = cm.create_ep(&res, Some(&mut QpInitAttr::new(QpType::Rc)))?;
//!     cm.listen(listen, 0)?;
//!     let id = cm.get_request(listen)?; // with its QP
//!     let mr = cm.reg_msgs(id, vec![0; 16])?;
//!     cm.post_recv_msg(id, 1, &mr, 0, 16)?;
//!     cm.accept(id, None)?;
//!     cm.get_recv_comp(id)?;
//!     let mut got = vec![0; 16];
//!     cm.mr_read(mr.handle, 0, &mut got)?;
//!     cm.disconnect(id)?;
//!     cm.dereg_mr(mr.handle)?;
//!     cm.destroy_ep(id)?;
//!     cm.destroy_ep(listen)?;
//!     Ok(got)
//! }
//!
//! fn client<B: DataPath>(cm: &B, server: &str) -> cmtwin::Result<()> {
//!     let hints = AddrInfoHints::new(0).with_port_space(PortSpace::TCP);
//!     let res = cm.getaddrinfo(Some(server), Some("7471"), Some(&hints))?.remove(0);
//!     let mut attr = QpInitAttr::new(QpType::Rc);
//!     let id = cm.create_ep(&res, Some(&mut attr))?;
//!     assert!(attr.cap.max_send_wr >= 16); // what the device granted, written back
//!     let mr = cm.reg_msgs(id, b"hello, server!!!".to_vec())?;
//!     cm.connect(id, None)?;
//!     cm.post_send_msg(id, 2, &mr, 0, 16, SendFlags::NONE)?; // its QP signals every send
//!     cm.get_send_comp(id)?;
//!     // Returns with the DISCONNECTED event, whichever side disconnected first.
//!     cm.disconnect(id)?;
//!     cm.dereg_mr(mr.handle)?;
//!     cm.destroy_ep(id)
//! }
//!
//! let fabric = cmtwin_sim::Fabric::builder(1)
//!     .host("server", cmtwin::Transport::Roce, &["10.0.0.1".parse()?])
//!     .host("client", cmtwin::Transport::Roce, &["10.0.0.2".parse()?])
//!     .build()?;
//! let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
//! let slot = got.clone();
//! fabric.spawn("server", "rdma_server", move |cm| {
//!     *slot.lock().unwrap() = server(&cm)?;
//!     Ok(())
//! });
//! fabric.spawn("client", "rdma_client", |cm| {
//!     cm.sleep(Duration::from_millis(1))?; // the server listens first
//!     client(&cm, "10.0.0.1")
//! });
//! fabric.run()?;
//! assert_eq!(&got.lock().unwrap()[..], b"hello, server!!!");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
