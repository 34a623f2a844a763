//! Ports of rdma-core's example programs over [`cmtwin::verbs::DataPath`], written once for
//! every backend and wire-compatible with the C tools: the examples `rping`, `ucmatose`,
//! `udaddy`, `mckey` and `rdma_server_client` run them on the simulator or the real backend,
//! and backend-verbs' interop tests run them against the C `rping`, `ucmatose`, `udaddy`,
//! `mckey`, `rdma_server` and `rdma_client` in the Soft-RoCE VM.
//!
//! * [`session`]: the connection steps both ports share (expected CM events, a client connect
//!   that retries while the server is not yet listening, completions waited for while the CM
//!   channel is watched for the peer's disconnect, releasing the verbs objects).
//! * [`command_line`]: where an example's sides run ([`command_line::Mode`]) and how a
//!   peer's address is written.
//! * [`simulated`]: a port's two sides as two processes of a simulated fabric, or the
//!   members of a group as processes of their own hosts.
//! * [`rping`]: rping's protocol (buffer advertisements, RDMA read and write, verification).
//! * [`ucmatose`]: ucmatose's default message exchange over one connection.
//! * [`kv_rpc`]: a key-value RPC that reconnects after any failure and executes each answered
//!   request exactly once (not a port of a C tool).
//! * [`rdma_server_client`]: `rdma_server`/`rdma_client` and, in RC mode,
//!   `rdma_xserver`/`rdma_xclient`: synchronous endpoints (`rdma_getaddrinfo`,
//!   `rdma_create_ep`, `rdma_get_request`) and librdmacm's `rdma_verbs.h` helpers.
//! * [`udaddy`]: udaddy's datagram exchange (SIDR, sends with immediate data, replies
//!   through an address handle made from a receive).
//! * [`mckey`]: mckey's multicast exchange (a sender's datagrams to a group, counted by each
//!   receiver that joined it).

pub mod command_line;
pub mod kv_rpc;
pub mod mckey;
pub mod rdma_server_client;
pub mod rping;
pub mod session;
pub mod simulated;
pub mod ucmatose;
pub mod udaddy;
