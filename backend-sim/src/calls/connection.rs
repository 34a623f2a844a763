//! Connections: listen, connect, accept, reject, establish, disconnect and notify (§4.7–§4.13,
//! §9). The messages they send and the events those cause are handled in `ibcm.rs`.

use std::borrow::Cow;
use std::sync::Arc;

use cmtwin::verbs::QpState;
use cmtwin::{
    delivered_private_data_len, max_private_data, AsyncEvent, Call, CmError, ConnData, ConnParam,
    Errno, IbRejReason, IdHandle, PortSpace, PrivateDataOp, Result, Transport, RDMA_MAX_RESP_RES,
};

use crate::cm::endpoint::{CommEst, EpState};
use crate::cm::messages::{padded, Body, Dest, Request};
use crate::config::ack_timeout;
use crate::world::{CmState, DevKey, HostKey, IdKey, ListenState, World};

/// The kernel's cap on listen backlogs (`net.rdma_ucm.max_backlog`).
const MAX_BACKLOG: usize = 1024;
/// The simulated devices' `max_qp_rd_atom` / `max_qp_init_rd_atom`, the same on every
/// transport (`device_profile.rs`).
pub(crate) const DEVICE_MAX_RD_ATOM: u8 = crate::verbs::MAX_RD_ATOM;

/// Checks private data against the transport's limit for `op` (§6.1): EINVAL, never truncation.
fn check_private_data(
    call: Call,
    transport: Transport,
    op: PrivateDataOp,
    data: &[u8],
) -> Result<()> {
    let max = max_private_data(transport, op).min(255);
    if data.len() > max {
        return Err(CmError::new(
            call,
            Errno::EINVAL,
            format!(
                "{} bytes of private data exceed the {max} allowed for {op:?} on {transport:?}",
                data.len()
            ),
        ));
    }
    Ok(())
}

/// A resource count from the parameters: `given`, or for 255 (`RDMA_MAX_RESP_RES` /
/// `RDMA_MAX_INIT_DEPTH`) `limit` capped at the device maximum. `rdma_connect` passes the
/// device maximum as the limit; `rdma_accept` the request's own value, as the CONNECT_REQUEST
/// showed it (librdmacm's `rdma_accept` treats no parameters alike).
fn resources(given: u8, limit: u8) -> u8 {
    if given == RDMA_MAX_RESP_RES {
        limit.min(DEVICE_MAX_RD_ATOM)
    } else {
        given
    }
}

/// What `rdma_connect`'s checks found.
struct ConnectChecked<'a> {
    key: IdKey,
    transport: Transport,
    ud: bool,
    op: PrivateDataOp,
    /// The caller's parameters (borrowed: no copy of their private data), or the defaults.
    param: Cow<'a, ConnParam>,
}

impl World {
    /// `rdma_listen`.
    pub(crate) fn listen(&mut self, host: HostKey, h: IdHandle, backlog: i32) -> Result<()> {
        let call = Call::Listen;
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        match self.id(key).state {
            CmState::Idle => self.auto_bind_any(call, key)?,
            CmState::AddrBound => {}
            _ => return Err(self.wrong_state(call, key)),
        }
        // REUSEADDR is re-checked as non-reusable when listening, then cleared (`rdma_listen`
        // calls `cma_check_port` with reuseaddr 0): the port's other holders are weighed as
        // against a plain bind of the id's address.
        let id = self.id(key);
        if id.reuseaddr {
            let (port, ip) = (id.port.expect("bound"), id.local.expect("bound").ip());
            let conflict = self.kernel.ports[&(host, id.ps, port)]
                .iter()
                .filter(|k| **k != key)
                .find_map(|k| self.port_conflict(key, ip, *k, false));
            if let Some(errno) = conflict {
                return Err(CmError::new(
                    call,
                    errno,
                    format!(
                        "port {port} is shared through REUSEADDR, and a listener may not share it"
                    ),
                ));
            }
        }
        if let Some(other) = self.iw_port_taken(key) {
            let port = self.id(key).port.expect("bound");
            return Err(CmError::new(
                call,
                Errno::EADDRINUSE,
                format!(
                    "port {port} is taken by the iWARP listener of {:?}: every iWARP listener \
                     holds a TCP port, whatever its port space",
                    self.id(other).ps
                ),
            ));
        }
        let backlog = usize::try_from(backlog)
            .ok()
            .filter(|b| (1..=MAX_BACKLOG).contains(b))
            .unwrap_or(MAX_BACKLOG);
        let id = self.id_mut(key);
        id.reuseaddr = false;
        id.state = CmState::Listen;
        // librdmacm queries the addresses after a successful listen.
        id.refresh_user_addrs();
        id.set_listen(ListenState {
            backlog,
            pending: 0,
        });
        Ok(())
    }

    /// On iWARP, the listening id of another port space that holds the TCP port `key` would
    /// listen on (siw_create_listen binds a TCP socket for a listener of any port space).
    fn iw_port_taken(&self, key: IdKey) -> Option<IdKey> {
        let id = self.id(key);
        let addr = id.local?;
        let iwarp = |d: &DevKey| self.topo.devices[*d].transport == Transport::Iwarp;
        let devices: Vec<DevKey> = match id.device {
            Some(d) => vec![d],
            None => self.topo.hosts[id.host].devices.clone(),
        };
        devices
            .iter()
            .filter(|d| iwarp(d))
            .find_map(|d| self.iw_listener_on(id.host, *d, addr, Some(key)))
            .filter(|other| self.id(*other).ps != id.ps)
    }

    /// Common checks of calls that need a device: removal, then a device.
    /// The id is looked up once: five calls of every connection go through here.
    fn need_device(&self, call: Call, key: IdKey) -> Result<Transport> {
        self.need_device_of(call, self.id(key))
    }

    /// [`World::need_device`] of the id found as `id`.
    fn need_device_of(&self, call: Call, id: &crate::kernel::Id) -> Result<Transport> {
        if id.state == CmState::DeviceRemoval {
            return Err(crate::world::removed_error(call));
        }
        id.librdmacm_device()
            .map(|dev| self.topo.devices[dev].transport)
            .ok_or_else(|| CmError::new(call, Errno::EINVAL, "the id has no device"))
    }

    /// How long `rdma_connect` of `h` blocks in siw's TCP handshake before its MPA request
    /// goes out (or its reset comes back): a round trip on the wire, for an iWARP RC connect
    /// that passes the call's checks towards an address that answers; `None` for every other
    /// connect (refused at once, not iWARP, or a silent address: [`IW_TCP_SYN_GIVE_UP`]).
    ///
    /// [`IW_TCP_SYN_GIVE_UP`]: crate::IW_TCP_SYN_GIVE_UP
    pub(crate) fn iw_tcp_handshake(
        &self,
        host: HostKey,
        h: IdHandle,
        param: Option<&ConnParam>,
    ) -> Option<std::time::Duration> {
        let checked = self.connect_checks(host, h, param).ok()?;
        if checked.transport != Transport::Iwarp || checked.ud {
            return None;
        }
        let dst = self.id(checked.key).peer?;
        match self.iw_tcp_connect(Call::Connect, dst) {
            Err(e) if e.errno == Errno::ETIMEDOUT => None,
            _ => Some(2 * self.cfg.wire_latency),
        }
    }

    /// `rdma_connect`'s checks of the id and the parameters, before anything is sent.
    fn connect_checks<'a>(
        &self,
        host: HostKey,
        h: IdHandle,
        param: Option<&'a ConnParam>,
    ) -> Result<ConnectChecked<'a>> {
        let call = Call::Connect;
        // The id is looked up once for all the checks.
        let (key, id) = self.id_entry(host, call, h)?;
        let transport = self.need_device_of(call, id)?;
        if id.state != CmState::RouteResolved {
            return Err(self.wrong_state(call, key));
        }
        let ud = !id.qp_type.is_connected();
        if id.ps == PortSpace::TCP && id.qp().is_none() && param.is_none() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "RDMA_PS_TCP without a QP needs connection parameters",
            ));
        }
        let p = param.map_or_else(|| Cow::Owned(ConnParam::default()), Cow::Borrowed);
        if transport == Transport::Iwarp && id.qp().is_none() {
            // cma_connect_iw passes conn_param->qp_num; iw_cm_connect looks it up before
            // siw makes its TCP connection.
            let dev = id.device.expect("checked: the id has a device");
            self.iw_get_qp(call, host, dev, p.qp_num)?;
        }
        if id.ps == PortSpace::TCP
            && [p.responder_resources, p.initiator_depth]
                .iter()
                .any(|v| *v != RDMA_MAX_RESP_RES && *v > DEVICE_MAX_RD_ATOM)
        {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "responder resources or initiator depth above the device maximum",
            ));
        }
        let op = if ud {
            PrivateDataOp::ConnectUd
        } else {
            PrivateDataOp::Connect
        };
        check_private_data(call, transport, op, &p.private_data)?;
        Ok(ConnectChecked {
            key,
            transport,
            ud,
            op,
            param: p,
        })
    }

    /// `rdma_connect`.
    pub(crate) fn connect(
        &mut self,
        host: HostKey,
        h: IdHandle,
        param: Option<&ConnParam>,
    ) -> Result<()> {
        let call = Call::Connect;
        let ConnectChecked {
            key,
            transport,
            ud,
            op,
            param: p,
        } = self.connect_checks(host, h, param)?;
        let id = self.id(key);
        let (src, dst) = (id.local.expect("resolved"), id.peer.expect("resolved"));
        if transport == Transport::Iwarp && !ud {
            // siw's TCP connection is made inside the call; a failure leaves the id with its
            // route, as cma.c restores ROUTE_RESOLVED.
            self.iw_tcp_connect(call, dst)?;
        }
        let plt = id.path_plt.unwrap_or(self.cfg.packet_life_time);
        let req = Request {
            src,
            dst,
            ps: id.ps,
            qp_type: id.qp_type,
            data: padded(&p.private_data, delivered_private_data_len(transport, op)),
            conn: ConnData {
                responder_resources: resources(p.responder_resources, DEVICE_MAX_RD_ATOM),
                initiator_depth: resources(p.initiator_depth, DEVICE_MAX_RD_ATOM),
                flow_control: p.flow_control,
                retry_count: p.retry_count.min(7),
                rnr_retry_count: p.rnr_retry_count.min(7),
                srq: self.announced_srq(key, p.srq),
                qp_num: id.qp().unwrap_or(p.qp_num),
            },
            ack_timeout: ack_timeout(self.cfg.ca_ack_delay, plt),
            plt,
            tclass: id.path_tclass,
        };
        self.id_mut(key).state = CmState::Connect;
        self.id_mut(key).req_conn = Some(req.conn);
        if transport == Transport::Iwarp && self.id(key).qp().is_none() {
            self.id_mut(key).set_iw_qp(Some(p.qp_num));
        }
        let to = Dest::Ip(dst.ip());
        let body = if ud {
            Body::SidrReq(Arc::new(req))
        } else {
            Body::Req(Arc::new(req))
        };
        let ep = self.new_active_endpoint(key);
        self.drive(ep, |e, out| e.connect(to, body, out));
        Ok(())
    }

    /// The endpoint of an id in CONNECT, or EINVAL.
    fn connected_ep(&self, call: Call, key: IdKey) -> Result<u64> {
        let id = self.id(key);
        match (id.state, id.ep.get()) {
            (CmState::Connect, Some(ep)) => Ok(ep),
            _ => Err(self.wrong_state(call, key)),
        }
    }

    /// After a failed accept the kernel tries to reject (§4.10): REJ 28, if the IB CM still can.
    fn reject_after_failure(&mut self, ep: u64) {
        if matches!(
            self.ep_state(ep),
            EpState::ReqRcvd | EpState::RepSent | EpState::MraRepRcvd
        ) {
            self.ep_reject(ep, IbRejReason::CONSUMER_DEFINED, &[]);
        }
    }

    /// librdmacm's `rdma_accept` moves the id's QP to INIT (`ucma_modify_qp_rtr`) before the
    /// kernel hears of the accept: from RTR, RTS, SQD or ERROR the device refuses (EINVAL), so
    /// the call fails with nothing sent and nothing changed (e.g. a second accept, whose QP
    /// the first moved to RTS). siw takes that transition as a no-op, hence IB and RoCE only.
    fn check_qp_can_reach_init(&self, call: Call, key: IdKey) -> Result<()> {
        match self.qp_state_of(key) {
            None | Some(QpState::Reset | QpState::Init) => Ok(()),
            Some(state) => Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("the QP cannot move to INIT (it is in {state:?})"),
            )),
        }
    }

    /// `rdma_accept`.
    pub(crate) fn accept(
        &mut self,
        host: HostKey,
        h: IdHandle,
        param: Option<&ConnParam>,
    ) -> Result<()> {
        let call = Call::Accept;
        let (key, id) = self.id_entry(host, call, h)?;
        let transport = self.need_device_of(call, id)?;
        let ep = self.connected_ep(call, key)?;
        if self.cm.eps[&ep].cm.is_active() {
            return self.accept_on_active(call, key, ep, param.is_some());
        }
        let id = self.id(key);
        if param.is_none() && id.qp().is_none() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "no QP and no connection parameters",
            ));
        }
        let p = param.cloned().unwrap_or_default();
        if self.ep_state(ep) == EpState::SidrReqRcvd {
            check_private_data(call, transport, PrivateDataOp::AcceptUd, &p.private_data)?;
            let qpn = id.qp().unwrap_or(p.qp_num);
            self.send_sidr_rep(key, ep, transport, qpn, &p.private_data);
            self.id_mut(key).owned = true;
            return Ok(());
        }
        if id.ps == PortSpace::TCP
            && [p.responder_resources, p.initiator_depth]
                .iter()
                .any(|v| *v != RDMA_MAX_RESP_RES && *v > DEVICE_MAX_RD_ATOM)
        {
            // librdmacm's own check (`ucma_valid_param`), before any command: nothing is sent.
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "responder resources or initiator depth above the device maximum",
            ));
        }
        if transport != Transport::Iwarp {
            self.check_qp_can_reach_init(call, key)?;
        }
        if transport == Transport::Iwarp
            && self.ep_state(ep) == EpState::Idle
            && self.cm.eps[&ep].cm.iw_rejected()
        {
            // iw_cm_accept outside CONN_RECV: the request was rejected (rdma_reject, or the
            // kernel's reject after a failed accept or establish).
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the request was rejected: nothing to accept",
            ));
        }
        if transport == Transport::Iwarp && self.ep_state(ep) == EpState::Idle {
            // The initiator closed the TCP connection before the answer: siw_accept finds its
            // endpoint no longer holding the MPA request (measured on siw).
            return Err(CmError::new(
                call,
                Errno::ECONNRESET,
                "the initiator closed its TCP connection before the accept",
            ));
        }
        if transport == Transport::Iwarp && self.ep_state(ep) == EpState::Established {
            // rdma_accept's failure path moves the id's QP to ERROR (cma_modify_qp_err), and
            // on iWARP that ends the connection: DISCONNECTED on both sides (measured on siw).
            // An external QP is not the id's: nothing moves it.
            if id.qp().is_some() {
                self.drive(ep, |e, out| e.disconnect(out));
            }
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the connection is already established (the failed accept's QP error closes it)",
            ));
        }
        if transport == Transport::Iwarp && id.qp().is_none() {
            // cma_accept_iw passes conn_param->qp_num; iw_cm_accept's lookup fails before
            // the driver hears of the accept, and rdma_accept's failure path rejects.
            let dev = id.device.expect("checked: the id has a device");
            if let Err(e) = self.iw_get_qp(call, host, dev, p.qp_num) {
                self.reject_after_failure(ep);
                return Err(e);
            }
        }
        if self.ep_state(ep) != EpState::ReqRcvd {
            let state = self.ep_state(ep);
            self.reject_after_failure(ep);
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("the connection is not awaiting an answer (IB CM {state:?})"),
            ));
        }
        if let Err(e) = check_private_data(call, transport, PrivateDataOp::Accept, &p.private_data)
        {
            // librdmacm moved the QP through RTR to RTS; the kernel's REP fails, it rejects,
            // and librdmacm moves the QP to ERROR on its way out (`ucma_modify_qp_err`).
            self.reject_after_failure(ep);
            self.qp_to_error(key);
            return Err(e);
        }
        // The request's resources as the CONNECT_REQUEST showed them (the peer's, swapped).
        let requested = id.req_conn.unwrap_or_default();
        let conn = ConnData {
            responder_resources: resources(p.responder_resources, requested.initiator_depth),
            initiator_depth: resources(p.initiator_depth, requested.responder_resources),
            flow_control: p.flow_control,
            retry_count: p.retry_count.min(7),
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: self.announced_srq(key, p.srq),
            qp_num: id.qp().unwrap_or(p.qp_num),
        };
        let data = padded(
            &p.private_data,
            delivered_private_data_len(transport, PrivateDataOp::Accept),
        );
        if transport == Transport::Iwarp {
            return self.iw_accept(key, ep, conn, data);
        }
        // librdmacm moves the QP to RTR and RTS before the kernel sends the REP.
        if self.uc_qp_on_rc_id(key) {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the QP cannot move to RTR: a UC QP refuses the RTR attributes of the id's RC \
                 connection (max_dest_rd_atomic, min_rnr_timer)",
            ));
        }
        if !self.connect_qp(key, Some((conn.responder_resources, conn.initiator_depth))) {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the QP cannot move to RTR (it is not in INIT)",
            ));
        }
        self.send_rep(key, ep, conn, data);
        Ok(())
    }

    /// `rdma_accept` on iWARP once the checks passed: siw_accept moves the connection's QP
    /// (the id's, or the external one `conn.qp_num` names, which the iWARP CM then holds) to
    /// RTS and sends the MPA reply; a QP past RTR is refused (EINVAL) and siw closes the
    /// TCP connection.
    fn iw_accept(&mut self, key: IdKey, ep: u64, conn: ConnData, data: Vec<u8>) -> Result<()> {
        let call = Call::Accept;
        if self.id(key).qp().is_none() {
            self.id_mut(key).set_iw_qp(Some(conn.qp_num));
        }
        if !self.iw_qp_to_rts(key) {
            let state = self.cm_qp_state(key);
            self.id_mut(key).set_iw_qp(None);
            self.drive(ep, |e, out| e.iw_abort(out));
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("siw_accept: the QP is past RTR ({state:?})"),
            ));
        }
        self.send_rep(key, ep, conn, data);
        Ok(())
    }

    /// Answers the request `ep` holds for `key` (REP on IB and RoCE, MPA reply on iWARP)
    /// with `conn` and `data`; the id then owns the connection.
    fn send_rep(&mut self, key: IdKey, ep: u64, conn: ConnData, data: Vec<u8>) {
        self.id_mut(key).rep_conn = Some(conn);
        let plt = self.cm.eps[&ep].cm.plt();
        let ack = ack_timeout(self.cfg.ca_ack_delay, plt);
        self.id_mut(key).owned = true;
        let rep = Body::Rep {
            data,
            conn,
            ack_timeout: ack,
        };
        self.drive(ep, |e, out| e.accept(rep, out))
            .expect("the state was checked: a request is held");
    }

    /// Answers the SIDR request `ep` holds for `key` with SIDR REP status 0 (`cma_send_sidr_rep`):
    /// QP number `qpn`, the id's qkey, `data` padded to the field.
    fn send_sidr_rep(&mut self, key: IdKey, ep: u64, transport: Transport, qpn: u32, data: &[u8]) {
        let data = padded(
            data,
            delivered_private_data_len(transport, PrivateDataOp::AcceptUd),
        );
        let body = Body::SidrRep {
            status: 0,
            qpn,
            qkey: self.id(key).qkey,
            data,
        };
        self.drive(ep, |e, out| e.accept_sidr(body, out));
    }

    /// `rdma_accept` on an active id. librdmacm's `rdma_accept` always hands the kernel
    /// parameters (`ucma_copy_conn_param_to_kern` sets `valid`), so the kernel's
    /// `rdma_accept` tries to send a REP (`cma_accept_ib`), which `ib_send_cm_rep` refuses on
    /// the side that sent the REQ; the failure path then rejects the connection where the IB
    /// CM still can (REJ 28; on iWARP `iw_cm_accept` refuses and `iw_cm_reject` finds no
    /// request to answer). It never sends the RTU (that is `rdma_establish`). With a QP,
    /// librdmacm first moves it to INIT, RTR and RTS, which only succeeds while the REP is
    /// unprocessed; after the kernel's refusal it moves the QP to ERROR.
    fn accept_on_active(&mut self, call: Call, key: IdKey, ep: u64, has_param: bool) -> Result<()> {
        let has_qp = self.id(key).qp().is_some();
        if !has_param && !has_qp {
            // librdmacm reads conn_param->qp_num: a NULL dereference there.
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "no QP and no connection parameters",
            ));
        }
        if !has_qp || self.ep_state(ep) == EpState::RepRcvd {
            self.qp_to_error(key);
            self.ep_reject(ep, IbRejReason::CONSUMER_DEFINED, &[]);
        }
        Err(CmError::new(
            call,
            Errno::EINVAL,
            "an active id has no request to answer (the kernel's REP is refused)",
        ))
    }

    /// The active side's RTU after a REP: librdmacm's ACCEPT command without parameters, the
    /// kernel's `rdma_accept(id, NULL)` (`cma_rep_recv` on IB and RoCE). Where the IB CM holds
    /// no REP to answer, `ib_send_cm_rtu` fails and `cma_rep_recv` rejects the connection if
    /// the IB CM still can (REJ 28: a request held unanswered, one sent and unanswered, a REP
    /// sent); on iWARP `cma_accept_iw` refuses the missing parameters and `rdma_accept`'s
    /// `iw_cm_reject` answers a held request with an MPA reject. The call fails with EINVAL.
    fn send_rtu(&mut self, call: Call, ep: u64) -> Result<()> {
        if self.drive(ep, |e, out| e.send_rtu(out)) {
            return Ok(());
        }
        let state = self.ep_state(ep);
        self.ep_reject(ep, IbRejReason::CONSUMER_DEFINED, &[]);
        Err(CmError::new(
            call,
            Errno::EINVAL,
            format!("no REP to answer with an RTU (IB CM {state:?})"),
        ))
    }

    /// `rdma_establish`.
    pub(crate) fn establish(&mut self, host: HostKey, h: IdHandle) -> Result<()> {
        let call = Call::Establish;
        let key = self.id_key(host, call, h)?;
        self.need_device(call, key)?;
        if self.id(key).qp().is_some() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the id has a QP: librdmacm establishes it itself",
            ));
        }
        let ep = self.connected_ep(call, key)?;
        if self.ep_state(ep) == EpState::SidrReqRcvd {
            // The kernel's rdma_accept(id, NULL) on a held SIDR request answers it
            // (cma_send_sidr_rep, status 0): no QP number was ever given (0), the id's qkey,
            // no data. Without parameters ucma sets no uid: the id stays unreported.
            let transport = self.need_device(call, key)?;
            self.send_sidr_rep(key, ep, transport, 0, &[]);
            return Ok(());
        }
        self.send_rtu(call, ep)
    }

    /// `rdma_reject`.
    pub(crate) fn reject(&mut self, host: HostKey, h: IdHandle, data: &[u8]) -> Result<()> {
        let call = Call::Reject;
        let key = self.id_key(host, call, h)?;
        let transport = self.need_device(call, key)?;
        let ep = self.connected_ep(call, key)?;
        let ud = self.ep_state(ep) == EpState::SidrReqRcvd;
        let op = if ud {
            PrivateDataOp::RejectUd
        } else {
            PrivateDataOp::Reject
        };
        check_private_data(call, transport, op, data)?;
        if ud {
            self.drive(ep, |e, out| e.sidr_reject(data, out));
        } else if !self.ep_reject(ep, IbRejReason::CONSUMER_DEFINED, data) {
            let state = self.ep_state(ep);
            let cm = if transport == Transport::Iwarp {
                "iWARP CM"
            } else {
                "IB CM"
            };
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("nothing to reject ({cm} {state:?})"),
            ));
        }
        Ok(())
    }

    /// `rdma_disconnect`: DREQ when established, DREP after a DREQ, else nothing; returns 0.
    pub(crate) fn disconnect(&mut self, host: HostKey, h: IdHandle) -> Result<()> {
        let call = Call::Disconnect;
        // The id is looked up once for the checks and its QP.
        let (key, id) = self.id_entry(host, call, h)?;
        let transport = self.need_device_of(call, id)?;
        let qp = self.qp_of_found(key, id);
        let ep = match (id.state, id.ep.get()) {
            // cma.c rdma_disconnect hands a listener's own CM id to its CM: the IB CM finds
            // nothing to send (DREQ and DREP refused, ignored: 0), iw_cm_disconnect refuses
            // IW_CM_STATE_LISTEN (EINVAL).
            (CmState::Listen, _) if transport == Transport::Iwarp => {
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    "an iWARP listener has nothing to disconnect",
                ))
            }
            (CmState::Listen, _) => return Ok(()),
            (CmState::Connect | CmState::Disconnect, Some(ep)) => ep,
            _ => {
                // librdmacm moves the QP to ERROR (`ucma_shutdown`) before the kernel refuses
                // an id without a connection (cma.c `rdma_disconnect`: no IB CM id): the QP
                // stays in ERROR. siw takes INIT -> SQD as a no-op.
                if transport != Transport::Iwarp {
                    self.qp_to_error(key);
                }
                return Err(self.wrong_state(call, key));
            }
        };
        // librdmacm moves the QP to ERROR first (IB and RoCE; iWARP's graceful SQD close is
        // modelled as ERROR too), flushing every outstanding request. On iWARP the CM moves
        // the QP it holds as well (iwcm.c `iw_cm_disconnect`), an external one included.
        if transport == Transport::Iwarp {
            self.cm_qp_close(key);
        } else if let Some(q) = qp {
            self.qp_enter_error(q);
        }
        self.drive(ep, |e, out| e.disconnect(out));
        Ok(())
    }

    /// `rdma_notify` (§9).
    pub(crate) fn notify(&mut self, host: HostKey, h: IdHandle, event: AsyncEvent) -> Result<()> {
        let call = Call::Notify;
        let key = self.id_key(host, call, h)?;
        let transport = self.need_device(call, key)?;
        let id = self.id(key);
        if id.state == CmState::Listen {
            // A listener bound to a device has a CM id of its own (cma_ib_listen,
            // cma_iw_listen): cma.c rdma_notify returns 0 for any event on an iWARP device,
            // and the IB CM refuses every notify in LISTEN (cm_establish, cm_migrate: EINVAL).
            return match transport {
                Transport::Iwarp => Ok(()),
                _ => Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    format!("event {} on a listener (IB CM state Listen)", event.0),
                )),
            };
        }
        let Some(ep) = id.ep.get() else {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the id has no connection",
            ));
        };
        if transport == Transport::Iwarp {
            return Ok(());
        }
        let state = self.ep_state(ep);
        match event {
            AsyncEvent::COMM_EST => match self.drive(ep, |e, out| e.comm_est(out)) {
                CommEst::Established => Ok(()),
                CommEst::AlreadyEstablished => Err(CmError::new(
                    call,
                    Errno::EISCONN,
                    "the connection is already established",
                )),
                CommEst::NotApplicable(state) => Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    format!("COMM_EST in IB CM state {state:?}"),
                )),
            },
            AsyncEvent::PATH_MIG if state == EpState::Established => Ok(()),
            other => Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("event {} not applicable in IB CM state {state:?}", other.0),
            )),
        }
    }
}
