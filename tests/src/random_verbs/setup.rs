//! The starting point of every sequence: an RC connection and a UD pair on the bed, with
//! regions in every PD, and a few objects of another fabric (the foreign handles).

use std::net::SocketAddr;

use cmtwin::verbs::{AccessFlags, DataPath, QpInitAttrEx};
use cmtwin::{
    AhAttr, CmBackend, ConnParam, EventKind, IdHandle, PortSpace, QpCap, QpType, RDMA_UDP_QKEY,
};
use cmtwin_sim::SimBackend;

use super::{AhRec, CqRec, Entry, Home, Model, MrRec, PdRec, QpRec};
use crate::steps::{expect_event_for, expect_request, ok, Listener, RESOLVE_TIMEOUT};
use crate::ud_datapath::ud_connect;
use crate::{SimBed, TestBed};

/// The connected QPs' capacities: room for several entries and some inline bytes.
const RC_CAP: QpCap = QpCap {
    max_send_wr: 8,
    max_recv_wr: 8,
    max_send_sge: 4,
    max_recv_sge: 4,
    max_inline_data: 64,
};

/// The connection's retry counts (bounded, so that the blocking helpers end).
fn conn_param() -> ConnParam {
    ConnParam {
        retry_count: 3,
        rnr_retry_count: 3,
        ..ConnParam::default()
    }
}

/// The bed, set up: see the module documentation.
pub(super) fn set_up(bed: SimBed, other: SimBed) -> Model {
    let mut m = Model {
        bed,
        other,
        ids: Vec::new(),
        pds: Vec::new(),
        mrs: Vec::new(),
        channels: Vec::new(),
        cqs: Vec::new(),
        qps: Vec::new(),
        ahs: Vec::new(),
        event_channels: Vec::new(),
        wrs: Default::default(),
        next_wr: 0,
        writers: Vec::new(),
        words: Vec::new(),
        psns_restarted: false,
        ud_qpn: [0; 2],
        ud_qkey: RDMA_UDP_QKEY,
        to_server: AhAttr::default(),
        last_ud_recv: None,
        verbose: std::env::var_os("CMTWIN_PROPTEST_VERBOSE").is_some(),
    };
    m.connect_rc();
    m.connect_ud();
    m.foreign_objects();
    for pd in 0..m.pds.len() {
        if m.pds[pd].home != Home::Foreign {
            m.add_region(pd, 256, AccessFlags(0x7));
        }
    }
    m
}

impl Model {
    /// Records a live object of `home` in `pool`; its index.
    fn add<T>(pool: &mut Vec<Entry<T>>, home: Home, v: T) -> usize {
        pool.push(Entry {
            home,
            live: true,
            v,
        });
        pool.len() - 1
    }

    /// Gives id `id` of host `server` a PD, a channel, a CQ of `cqe` entries for both
    /// queues and a QP of `qp_type` with `cap`, all recorded; the QP's number.
    fn side(&mut self, server: bool, id: IdHandle, cqe: u32, ud: bool, cap: QpCap) -> u32 {
        let home = Self::home(server);
        let cm = self.cm(server).clone();
        let id_idx = Self::add(&mut self.ids, home, id);
        let pd = ok(cm.alloc_pd(id), "alloc_pd");
        let comp = ok(cm.create_comp_channel(id), "create_comp_channel");
        let cq = ok(cm.create_cq(id, cqe, Some(comp)), "create_cq");
        let mut attr = QpInitAttrEx::rc(pd, cq, cq);
        attr.cap = cap;
        if ud {
            attr.qp_type = QpType::Ud;
        }
        let qpn = ok(cm.create_qp_ex(id, &attr), "create_qp_ex");
        let qp = ok(cm.qp(id), "id->qp").expect("the id has its QP");
        let pd = Self::add(&mut self.pds, home, PdRec { pd, default: false });
        let channel = Self::add(&mut self.channels, home, comp);
        let cq = CqRec {
            cq,
            channel: Some(channel),
            unacked: 0,
            overrun: false,
        };
        let cq = Self::add(&mut self.cqs, home, cq);
        let rec = QpRec {
            qp,
            qpn,
            pd,
            send_cq: cq,
            recv_cq: cq,
            ud,
            id: Some(id_idx),
            sq_sig_all: true,
            timed: !ud,
            wedged: false,
        };
        Self::add(&mut self.qps, home, rec);
        qpn
    }

    /// The RC connection: the client's CQ has 4 entries, the server's 64.
    fn connect_rc(&mut self) {
        let (server, client) = (self.cm(true).clone(), self.cm(false).clone());
        let addr = SocketAddr::new(SimBed::SERVER_IP, 5000);
        let lch = ok(server.create_event_channel(), "server channel");
        let lid = ok(server.create_id(Some(lch), 0, PortSpace::TCP), "listener");
        ok(server.bind_addr(lid, addr), "bind");
        ok(server.listen(lid, 8), "listen");
        let cch = ok(client.create_event_channel(), "client channel");
        let cid = ok(client.create_id(Some(cch), 0, PortSpace::TCP), "client id");
        ok(
            client.resolve_addr(cid, None, addr, RESOLVE_TIMEOUT),
            "resolve_addr",
        );
        expect_event_for(&client, cch, EventKind::AddrResolved, cid, 0);
        ok(client.resolve_route(cid, RESOLVE_TIMEOUT), "resolve_route");
        expect_event_for(&client, cch, EventKind::RouteResolved, cid, 0);
        self.side(false, cid, 4, false, RC_CAP);
        ok(client.connect(cid, Some(&conn_param())), "connect");
        let listener = Listener {
            channel: lch,
            id: lid,
            addr,
        };
        let req = expect_request(&server, &listener);
        self.side(true, req.id, 64, false, RC_CAP);
        ok(server.accept(req.id, Some(&conn_param())), "accept");
        expect_event_for(&client, cch, EventKind::Established, cid, 0);
        expect_event_for(&server, lch, EventKind::Established, req.id, 0);
        Self::add(&mut self.ids, Home::Server, lid);
        self.event_channels.extend([(true, lch), (false, cch)]);
    }

    /// The UD pair (as udaddy makes it) and the client's address handle to the server.
    fn connect_ud(&mut self) {
        let (server, client) = (self.cm(true).clone(), self.cm(false).clone());
        let addr = SocketAddr::new(SimBed::SERVER_IP, 5001);
        let pair = ud_connect(&server, &client, addr, |_| {});
        self.ud_qpn = [pair.server.qpn, pair.client.qpn];
        self.ud_qkey = pair.to_server.qkey;
        self.to_server = pair.to_server.ah_attr;
        for (server, side) in [(true, pair.server), (false, pair.client)] {
            let home = Self::home(server);
            let id = Self::add(&mut self.ids, home, side.id);
            let pd = Self::add(
                &mut self.pds,
                home,
                PdRec {
                    pd: side.pd,
                    default: false,
                },
            );
            let channel = Self::add(&mut self.channels, home, side.comp);
            let cq = CqRec {
                cq: side.cq,
                channel: Some(channel),
                unacked: 0,
                overrun: false,
            };
            let cq = Self::add(&mut self.cqs, home, cq);
            let rec = QpRec {
                qp: side.qp,
                qpn: side.qpn,
                pd,
                send_cq: cq,
                recv_cq: cq,
                ud: true,
                id: Some(id),
                sq_sig_all: true,
                timed: false,
                wedged: false,
            };
            Self::add(&mut self.qps, home, rec);
            if !server {
                let ah = ok(client.create_ah(side.pd, &self.to_server), "create_ah");
                Self::add(&mut self.ahs, home, AhRec { ah, pd });
            }
        }
        Self::add(&mut self.ids, Home::Server, pair.listener);
        self.event_channels
            .extend([(true, pair.server.channel), (false, pair.client.channel)]);
    }

    /// One object of each kind on the other fabric's server.
    fn foreign_objects(&mut self) {
        let cm: SimBackend = self.other.server().clone();
        let f = Home::Foreign;
        let id = ok(cm.create_id(None, 0, PortSpace::TCP), "foreign id");
        let addr = SocketAddr::new(SimBed::SERVER_IP, 5000);
        ok(cm.bind_addr(id, addr), "foreign bind");
        Self::add(&mut self.ids, f, id);
        let pd = ok(cm.alloc_pd(id), "foreign alloc_pd");
        let comp = ok(cm.create_comp_channel(id), "foreign channel");
        let cq = ok(cm.create_cq(id, 8, Some(comp)), "foreign create_cq");
        let mr = ok(
            cm.reg_mr(pd, vec![0x5a; 128], AccessFlags(0x7)),
            "foreign reg_mr",
        );
        let qp = ok(
            cm.create_external_qp(&QpInitAttrEx::rc(pd, cq, cq)),
            "foreign create_qp",
        );
        let qpn = ok(cm.qp_number(qp), "foreign qp_num");
        // A global route: RoCE refuses a handle without one.
        let ah = ok(cm.create_ah(pd, &self.to_server), "foreign create_ah");
        let pd = Self::add(&mut self.pds, f, PdRec { pd, default: false });
        let channel = Self::add(&mut self.channels, f, comp);
        let cq = CqRec {
            cq,
            channel: Some(channel),
            unacked: 0,
            overrun: false,
        };
        let cq = Self::add(&mut self.cqs, f, cq);
        let shadow = vec![0x5a; 128];
        Self::add(&mut self.mrs, f, MrRec { mr, pd, shadow });
        let rec = QpRec {
            qp,
            qpn,
            pd,
            send_cq: cq,
            recv_cq: cq,
            ud: false,
            id: None,
            sq_sig_all: true,
            timed: false,
            wedged: false,
        };
        Self::add(&mut self.qps, f, rec);
        Self::add(&mut self.ahs, f, AhRec { ah, pd });
    }

    /// Registers `len` bytes (a pattern of the region's index) with `access` in PD `pd`.
    pub(super) fn add_region(&mut self, pd: usize, len: usize, access: AccessFlags) {
        let server = self.pds[pd].home == Home::Server;
        let fill: Vec<u8> = (0..len).map(|i| (i + self.mrs.len() * 7) as u8).collect();
        let mr = ok(
            self.cm(server)
                .reg_mr(self.pds[pd].v.pd, fill.clone(), access),
            "reg_mr",
        );
        let home = Self::home(server);
        Self::add(
            &mut self.mrs,
            home,
            MrRec {
                mr,
                pd,
                shadow: fill,
            },
        );
    }
}
