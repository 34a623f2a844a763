//! Small RC messages on the simulator's data path: one connection, its client sending 8-byte
//! inline messages to posted receives, a window at a time, each window's packets and
//! acknowledgements run off the timeline from an event loop, every completion checked.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpInitAttrEx, RecvWr, SendOp, SendWr, WcStatus,
    WorkCompletion,
};
use cmtwin::{
    ChannelHandle, CmBackend, ConnParam, CqHandle, EventKind, IdHandle, PortSpace, QpCap, QpHandle,
    Result,
};
use cmtwin_sim::{Fabric, SimBackend};

use crate::next;

/// Messages posted before the timeline runs (the QPs' queue depth).
pub const WINDOW: u32 = 256;
/// Bytes per message.
pub const MESSAGE_LEN: usize = 8;

/// One side of the connection: its QP and the one CQ of both its queues.
#[derive(Clone, Copy, Debug)]
struct Side {
    qp: QpHandle,
    cq: CqHandle,
}

/// A connected pair of QPs on a fabric with hosts "server" and "client".
pub struct RcPair {
    fabric: Fabric,
    server: SimBackend,
    client: SimBackend,
    s: Side,
    c: Side,
    rx: MemoryRegion,
}

/// Gives `id` a PD, a CQ of `2 * WINDOW` entries and a QP of `WINDOW` requests each way.
fn side(cm: &SimBackend, id: IdHandle) -> Result<(Side, cmtwin::PdHandle)> {
    let pd = cm.alloc_pd(id)?;
    let cq = cm.create_cq(id, 2 * WINDOW, None)?;
    let mut attr = QpInitAttrEx::rc(pd, cq, cq);
    attr.cap = QpCap {
        max_send_wr: WINDOW,
        max_recv_wr: WINDOW,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: MESSAGE_LEN as u32,
    };
    cm.create_qp_ex(id, &attr)?;
    let qp = cm
        .qp(id)?
        .ok_or_else(|| cmtwin::CmError::application("the id has no QP"))?;
    Ok((Side { qp, cq }, pd))
}

/// Connects "client" of `fabric` to a listener of "server" at `addr`.
pub fn rc_pair(fabric: Fabric, addr: SocketAddr) -> Result<RcPair> {
    let (server, client) = (fabric.backend("server"), fabric.backend("client"));
    let lch: ChannelHandle = server.create_event_channel()?;
    let lid = server.create_id(Some(lch), 0, PortSpace::TCP)?;
    server.bind_addr(lid, addr)?;
    server.listen(lid, 8)?;
    let cch = client.create_event_channel()?;
    let cid = client.create_id(Some(cch), 0, PortSpace::TCP)?;
    client.resolve_addr(cid, None, addr, Duration::from_secs(2))?;
    next(&client, cch, EventKind::AddrResolved)?;
    client.resolve_route(cid, Duration::from_secs(2))?;
    next(&client, cch, EventKind::RouteResolved)?;
    let (c, _) = side(&client, cid)?;
    client.connect(cid, Some(&ConnParam::default()))?;
    let child = next(&server, lch, EventKind::ConnectRequest)?;
    let (s, spd) = side(&server, child)?;
    let rx = server.reg_mr(
        spd,
        vec![0; WINDOW as usize * MESSAGE_LEN],
        AccessFlags::LOCAL_WRITE,
    )?;
    server.accept(child, None)?;
    next(&client, cch, EventKind::Established)?;
    next(&server, lch, EventKind::Established)?;
    Ok(RcPair {
        fabric,
        server,
        client,
        s,
        c,
        rx,
    })
}

impl RcPair {
    /// Sends `messages` messages (a multiple of [`WINDOW`] is exact; the rest is rounded up to
    /// whole windows), checking every completion; returns how many were sent.
    pub fn exchange(&self, messages: u64) -> Result<u64> {
        let windows = messages.div_ceil(u64::from(WINDOW));
        let mut wc = vec![WorkCompletion::default(); WINDOW as usize];
        let mut sent = 0;
        for _ in 0..windows {
            for slot in 0..WINDOW {
                let sge = [self.rx.sge(slot as usize * MESSAGE_LEN, MESSAGE_LEN as u32)];
                let wr = RecvWr {
                    wr_id: u64::from(slot),
                    sg_list: &sge,
                };
                self.server.post_recv(self.s.qp, &wr)?;
            }
            for slot in 0..WINDOW {
                let bytes = (sent + u64::from(slot)).to_le_bytes();
                let wr = SendWr::new(u64::from(slot), SendOp::Send, Payload::Inline(&bytes));
                self.client.post_send(self.c.qp, &wr)?;
            }
            self.fabric
                .run_until_idle()
                .map_err(|e| cmtwin::CmError::application(e.to_string()))?;
            for (cm, side) in [(&self.server, self.s), (&self.client, self.c)] {
                let n = cm.poll_cq(side.cq, &mut wc)?;
                if n != WINDOW as usize || wc[..n].iter().any(|w| w.status != WcStatus::SUCCESS) {
                    return Err(cmtwin::CmError::application(format!(
                        "{n} completions of a window of {WINDOW}, or a failed one"
                    )));
                }
            }
            sent += u64::from(WINDOW);
        }
        Ok(sent)
    }
}
