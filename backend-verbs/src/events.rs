//! Translation of librdmacm's `struct rdma_cm_event` into cmtwin's owned events.
//!
//! Which member of the `param` union means something depends on the kind and on the id's QP
//! type: connection kinds carry `conn` (RC/UC ids) or `ud` (UD ids), multicast kinds carry
//! `ud` plus the join context (stored by librdmacm in `ud.private_data`), USER carries `arg`.
//! Private data is copied with exactly `private_data_len` bytes, as delivered.

use cmtwin::{
    AhAttr, ConnData, EventInfo, EventKind, EventParam, GlobalRoute, IdHandle, PortSpace, UdData,
};

use crate::ffi::{EventSnapshot, RawUd};

/// The `UdData` of a snapshot.
fn ud_data(ud: &RawUd) -> UdData {
    UdData {
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid: ud.dgid,
                flow_label: ud.flow_label,
                sgid_index: ud.sgid_index,
                hop_limit: ud.hop_limit,
                traffic_class: ud.traffic_class,
            },
            dlid: ud.dlid,
            sl: ud.sl,
            src_path_bits: ud.src_path_bits,
            static_rate: ud.static_rate,
            is_global: ud.is_global != 0,
            port_num: ud.port_num,
        },
        qp_num: ud.qp_num,
        qkey: ud.qkey,
    }
}

/// Builds the event info of `snap`, for the id `id` of port space `ps` (the new child for
/// CONNECT_REQUEST), delivered on a listener `listen_id` (CONNECT_REQUEST only); `ud` tells
/// whether the id's QP type is UD.
pub(crate) fn event_info(
    snap: &EventSnapshot,
    id: IdHandle,
    ps: PortSpace,
    listen_id: Option<IdHandle>,
    ud: bool,
) -> EventInfo {
    let kind = EventKind::from_raw(snap.kind);
    let param = match kind {
        EventKind::User => EventParam::User(snap.word0),
        EventKind::MulticastJoin | EventKind::MulticastError => EventParam::Multicast {
            ud: ud_data(&snap.ud),
            context: snap.word0,
        },
        EventKind::ConnectRequest
        | EventKind::ConnectResponse
        | EventKind::ConnectError
        | EventKind::Unreachable
        | EventKind::Rejected
        | EventKind::Established => {
            if ud {
                EventParam::Ud(ud_data(&snap.ud))
            } else {
                let c = &snap.conn;
                EventParam::Conn(ConnData {
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth,
                    flow_control: c.flow_control,
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                    srq: c.srq,
                    qp_num: c.qp_num,
                })
            }
        }
        _ => EventParam::None,
    };
    let mut info = EventInfo::new(kind, snap.status, id, ps);
    if kind == EventKind::ConnectRequest {
        info.listen_id = listen_id;
    }
    info.param = param;
    info.private_data = snap.private_data.clone();
    info
}

/// A USER event, as `rdma_write_cm_event` would deliver it.
pub(crate) fn user_event(id: IdHandle, ps: PortSpace, status: i32, arg: u64) -> EventInfo {
    let mut info = EventInfo::new(EventKind::User, status, id, ps);
    info.param = EventParam::User(arg);
    info
}

/// An ADDRINFO_RESOLVED (status 0) or ADDRINFO_ERROR event.
pub(crate) fn addrinfo_event(
    id: IdHandle,
    ps: PortSpace,
    kind: EventKind,
    status: i32,
) -> EventInfo {
    EventInfo::new(kind, status, id, ps)
}
