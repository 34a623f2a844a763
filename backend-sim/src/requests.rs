//! Requests arriving at a host's CM (§4.9): the listener that takes a REQ or SIDR REQ, the
//! rejects sent when none does, and the new child id with its passive endpoint. Produces
//! CONNECT_REQUEST. On iWARP also the TCP connection a request rides on: made (or refused)
//! inside `rdma_connect`, to a port that a listener of any port space holds.

use std::net::{IpAddr, SocketAddr};

use cmtwin::{
    Call, CmError, ConnData, Errno, EventKind, EventParam, IbRejReason, PortSpace, PrivateDataOp,
    Result, SidrStatus, Transport, UdData,
};

use crate::calls::is_any;
use crate::cm::messages::{padded, Body, Dest, EpKey, Request};
use crate::trace::{Entry, TraceKind};
use crate::world::{CmState, DevKey, HostKey, Id, IdKey, World};

impl World {
    /// A REQ or SIDR REQ arrives at `host` on device `dev` (§4.9).
    pub(crate) fn on_req(
        &mut self,
        host: HostKey,
        dev: DevKey,
        from: EpKey,
        req: Request,
        sidr: bool,
    ) {
        // A duplicate of a request we already hold: answer with an MRA while it is undecided.
        if let Some(&ep) = self.cm.passive_by_peer.get(&(host, from)) {
            self.drive(ep, |e, out| e.on_duplicate_request(from, out));
            return;
        }
        let reply_rej = |w: &mut World, reason: i32| {
            let transport = w.topo.devices[dev].transport;
            let body = if sidr {
                let status = if reason == IbRejReason::INVALID_SERVICE_ID {
                    SidrStatus::UNSUPPORTED
                } else {
                    SidrStatus::REJECT
                };
                let len = cmtwin::delivered_private_data_len(transport, PrivateDataOp::RejectUd);
                Body::SidrRep {
                    status,
                    qpn: 0,
                    qkey: 0,
                    data: padded(&[], len),
                }
            } else if transport == Transport::Iwarp {
                // iWARP: nothing listens on the port → the TCP connection is reset; a
                // listener that refuses it answers with an MPA reject (iw_cm_reject).
                if reason == IbRejReason::INVALID_SERVICE_ID {
                    Body::Rst
                } else {
                    let len = cmtwin::delivered_private_data_len(transport, PrivateDataOp::Reject);
                    Body::MpaRej {
                        data: padded(&[], len),
                    }
                }
            } else {
                let len = cmtwin::delivered_private_data_len(transport, PrivateDataOp::Reject);
                Body::Rej {
                    reason,
                    data: padded(&[], len),
                }
            };
            w.send(host, 0, Dest::Ep(from), body);
        };
        // The IB CM's stale-connection check (cm.c, cm_match_req): a REQ from a requester
        // (device and QP number) that a connection of this CM still holds, established or in
        // timewait, is rejected with STALE_CONN, and an established holder is disconnected
        // (the CM sends its DREQ itself), so that the requester's retry can find it gone.
        let ib_cm = !sidr && self.topo.devices[dev].transport != Transport::Iwarp;
        let requester = self
            .cm
            .eps
            .get(&from)
            .map(|e| (e.device, req.conn.qp_num))
            .filter(|_| ib_cm);
        if let Some((rdev, qpn)) = requester {
            if let Some(&holder) = self.cm.by_remote_qpn.get(&(host, rdev, qpn)) {
                self.record_text(Some(host), TraceKind::Drop, |w| {
                    format!(
                        "stale connection: QP {qpn:#x} of {} is still held",
                        w.topo.devices[rdev].name
                    )
                });
                reply_rej(self, IbRejReason::STALE_CONN);
                if self.ep_state(holder) == crate::cm::endpoint::EpState::Established {
                    self.drive(holder, |e, out| e.disconnect(out));
                }
                return;
            }
        }
        // cma.c `cma_ib_id_from_event` validates the receiving netdev against the CMA
        // header's addresses (`validate_net_dev`), refusing loopback and zero ones
        // (-EHOSTUNREACH): a request from a loopback-resolved id fails the handler, and the
        // IB CM rejects it (REJ 28 / SIDR status 2), wherever it found a listener.
        if (is_any(req.src.ip()) || is_any(req.dst.ip())) && self.ib_cm_listens(host, dev, &req) {
            reply_rej(self, IbRejReason::CONSUMER_DEFINED);
            return;
        }
        let Some(listener) = self.find_listener(host, dev, &req) else {
            // The IB CM finds its listener by (device, service id) alone (cm.c,
            // `cm_find_listen`): none there, REJ 8 / SIDR status 1. One there whose rdma_cm
            // ids all refuse the address (cma.c, `cma_find_listener` fails in
            // `cma_ib_id_from_event`) fails the handler, and the IB CM rejects the request
            // (REJ 28 / SIDR status 2, `cm_destroy_id`).
            let reason = if self.ib_cm_listens(host, dev, &req) {
                IbRejReason::CONSUMER_DEFINED
            } else {
                IbRejReason::INVALID_SERVICE_ID
            };
            reply_rej(self, reason);
            return;
        };
        let (l_qp_type, l_state, ls, l_sync, l_channel) = {
            let l = self.id(listener);
            (
                l.qp_type,
                l.state,
                *l.listen().expect("listening"),
                l.sync,
                l.channel,
            )
        };
        // The request's QP type must be the listener's (§13.1).
        if l_qp_type != req.qp_type || l_state != CmState::Listen {
            reply_rej(self, IbRejReason::CONSUMER_DEFINED);
            return;
        }
        if ls.pending >= ls.backlog {
            let listener_handle = self.id_handle(listener);
            let entry = Entry::BacklogFull {
                listener: listener_handle,
            };
            self.record(Some(host), TraceKind::Drop, entry);
            // ucma refuses the request with -ENOMEM. The IB CM then drops a REQ without a REJ
            // so that its retransmission may find room (cm.c, cm_destroy_id from REQ_RCVD),
            // but answers a SIDR REQ with SIDR REP status 2 whatever the error (from
            // SIDR_REQ_RCVD); iWARP has no retransmission here and iw_cm.c rejects the
            // connection (MPA reject).
            if sidr || self.topo.devices[dev].transport == Transport::Iwarp {
                reply_rej(self, IbRejReason::CONSUMER_DEFINED);
            }
            return;
        }
        // The new child id, in CONNECT, bound to the receiving device, not yet owned by user space.
        let child_key = self.fresh_key();
        let (channel, sync) = if l_sync {
            let private = self.new_private_channel(host, child_key);
            // The child's channel belongs to whoever owns the listener's.
            let owner = self.kernel.channels.get(&l_channel).and_then(|c| c.owner);
            if let Some(c) = self.kernel.channels.get_mut(&private) {
                c.owner = owner;
            }
            (private, true)
        } else {
            (l_channel, false)
        };
        let l = self.id(listener);
        let child = Id {
            qp_type: l.qp_type,
            state: CmState::Connect,
            device: Some(dev),
            local: Some(std::net::SocketAddr::new(
                req.dst.ip(),
                l.local.map_or(req.dst.port(), |a| a.port()),
            )),
            peer: Some(req.src),
            afonly: l.afonly,
            tos: l.tos,
            path_plt: Some(req.plt),
            path_tclass: req.tclass,
            qkey: l.qkey,
            owned: false,
            req_conn: Some(req.conn),
            ..Id::new(host, channel, sync, l.context, l.ps)
        };
        self.kernel.ids.insert(child_key, child);
        let ep = self.new_passive_endpoint(child_key, from, &req, sidr);
        self.cm.passive_by_peer.insert((host, from), ep);
        if let Some(remote) = requester {
            self.hold_remote_qpn(ep, remote);
        }
        self.id_mut(listener)
            .listen_mut()
            .expect("listening")
            .pending += 1;
        let param = if sidr {
            EventParam::Ud(UdData::default())
        } else if self.topo.devices[dev].transport == Transport::Iwarp {
            // iw_cm passes on the MPA request's IRD and ORD only (seen from this side:
            // swapped); no QPN, retry counts or flow control exist there (measured on siw).
            EventParam::Conn(ConnData {
                responder_resources: req.conn.initiator_depth,
                initiator_depth: req.conn.responder_resources,
                ..ConnData::default()
            })
        } else {
            // The child sees the peer's resources from its own side: swapped.
            EventParam::Conn(ConnData {
                responder_resources: req.conn.initiator_depth,
                initiator_depth: req.conn.responder_resources,
                ..req.conn
            })
        };
        self.queue_event_full(
            child_key,
            listener,
            Some(listener),
            EventKind::ConnectRequest,
            0,
            param,
            req.data,
            None,
        );
    }

    /// Whether the IB CM of `dev` listens on `req`'s service id (port space and port): some
    /// id of `host` listens on that port on `dev` or, bound to a wildcard address, on every
    /// device (cma.c's `cma_listen_on_all`), whatever address it matches. Never on iWARP,
    /// whose listeners are TCP sockets.
    fn ib_cm_listens(&self, host: HostKey, dev: DevKey, req: &Request) -> bool {
        if self.topo.devices[dev].transport == Transport::Iwarp {
            return false;
        }
        let Some(holders) = self.kernel.ports.get(&(host, req.ps, req.dst.port())) else {
            return false;
        };
        holders.iter().any(|k| {
            let id = self.id(*k);
            id.listen().is_some() && id.device.is_none_or(|d| d == dev)
        })
    }

    /// The listener that takes a request for `req.dst` on `dev`: a specific-address listener
    /// first, then a wildcard one (§4.9).
    fn find_listener(&self, host: HostKey, dev: DevKey, req: &Request) -> Option<IdKey> {
        let holders = self.kernel.ports.get(&(host, req.ps, req.dst.port()))?;
        let listening = || {
            holders
                .iter()
                .copied()
                .filter(|k| self.id(*k).listen().is_some())
        };
        let specific = listening().find(|k| {
            let i = self.id(*k);
            i.local.is_some_and(|a| a.ip() == req.dst.ip()) && i.device == Some(dev)
        });
        specific.or_else(|| {
            listening().find(|k| {
                let i = self.id(*k);
                let Some(a) = i.local else { return false };
                let wildcard = a.ip().is_unspecified() || a.ip().is_loopback();
                let family_ok =
                    a.is_ipv4() == req.dst.is_ipv4() || (a.is_ipv6() && i.afonly != Some(true));
                wildcard && family_ok
            })
        })
    }
}

/// iWARP's TCP side (§5.3, measured on siw): siw makes the TCP connection inside
/// `rdma_connect`, and every listener, of any port space, holds its TCP port.
impl World {
    /// The TCP connection an iWARP `rdma_connect` to `dst` makes before it returns: refused
    /// (ECONNREFUSED, the peer's reset) when nothing listens on `dst`'s port, timed out
    /// (ETIMEDOUT) when `dst` never answers: a silent address, or one no host of the fabric
    /// holds (resolved on a NOARP netdev, the SYNs go nowhere). Linux blocks in the call until
    /// then (127 s of SYN retries), and so does `SimBackend::connect` (`IW_TCP_SYN_GIVE_UP`)
    /// before it returns this error.
    pub(crate) fn iw_tcp_connect(&self, call: Call, dst: SocketAddr) -> Result<()> {
        let nobody = !self.topo.devices.iter().any(|d| d.ips.contains(&dst.ip()));
        if nobody || self.topo.silent_ips.contains(&dst.ip()) {
            return Err(CmError::new(
                call,
                Errno::ETIMEDOUT,
                format!("the TCP connection to {dst} was never answered (siw connects inside rdma_connect)"),
            ));
        }
        let Some((host, dev)) = self.topo.owner_of_ip(dst.ip()) else {
            return Ok(());
        };
        if self.iw_listener_on(host, dev, dst, None).is_some() {
            return Ok(());
        }
        Err(CmError::new(
            call,
            Errno::ECONNREFUSED,
            format!("nothing listens on {dst}: its TCP connection was reset (siw connects inside rdma_connect)"),
        ))
    }

    /// A listening id of `host`, of any port space but `except`'s, whose TCP listening socket
    /// on `dev` would take `addr` (the same port; the same address or a wildcard one).
    pub(crate) fn iw_listener_on(
        &self,
        host: HostKey,
        dev: DevKey,
        addr: SocketAddr,
        except: Option<IdKey>,
    ) -> Option<IdKey> {
        let wildcard = |ip: IpAddr| ip.is_unspecified() || ip.is_loopback();
        [
            PortSpace::TCP,
            PortSpace::UDP,
            PortSpace::IB,
            PortSpace::IPOIB,
        ]
        .iter()
        .filter_map(|ps| self.kernel.ports.get(&(host, *ps, addr.port())))
        .flatten()
        .copied()
        .filter(|k| Some(*k) != except)
        .find(|k| {
            let id = self.id(*k);
            let on_dev = id.device.is_none_or(|d| d == dev);
            let ip_ok = id
                .local
                .is_some_and(|a| a.ip() == addr.ip() || wildcard(a.ip()) || wildcard(addr.ip()));
            id.listen().is_some() && on_dev && ip_ok
        })
    }
}
