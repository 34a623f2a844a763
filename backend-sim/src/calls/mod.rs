//! The calls of librdmacm as the kernel and librdmacm execute them, one area per file:
//!
//! | file | calls | events produced |
//! |---|---|---|
//! | `channel.rs` | create/destroy_event_channel, get_cm_event, ack_cm_event | (librdmacm's rewrite of CONNECT_RESPONSE into ESTABLISHED) |
//! | `id.rs` | create_id, destroy_id, migrate_id | |
//! | `address.rs` | bind_addr, resolve_addr, resolve_route | ADDR_RESOLVED, ADDR_ERROR, ROUTE_RESOLVED, ROUTE_ERROR |
//! | `connection.rs` | listen, connect, accept, reject, establish, disconnect, notify | ESTABLISHED (notify) |
//! | `multicast.rs` | join_multicast, leave_multicast | MULTICAST_JOIN |
//! | `addrinfo.rs` (`getaddrinfo.rs`: the lookup) | resolve_addrinfo, query_addrinfo | ADDRINFO_RESOLVED (DNS mode only: a name that does not resolve fails synchronously, as librdmacm's emulation does; ADDRINFO_ERROR belongs to SA mode, which is not modelled) |
//! | `options.rs` | set_option | ROUTE_RESOLVED (IB_PATH) |
//! | `qp.rs` | create_qp, destroy_qp | |
//! | `user_event.rs` | write_cm_event | USER |
//!
//! Messages and the events they cause are in `ibcm.rs`; faults (DEVICE_REMOVAL, ADDR_CHANGE,
//! MULTICAST_ERROR, UNREACHABLE on neighbour change, failing SA path queries) in `faults.rs`.

mod address;
mod addrinfo;
mod channel;
mod connection;
mod getaddrinfo;
mod id;
mod multicast;
mod options;
mod qp;
mod user_event;

pub(crate) use address::is_any;
