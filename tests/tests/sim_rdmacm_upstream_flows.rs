//! rdma-core's own librdmacm tests, ported by an outside user against the public API only:
//! the flows of `tests/test_rdmacm.py` (pyverbs' CMResources: synchronous and asynchronous
//! ids, with and without a QP of the CM, an external QP moved through `init_qp_attr`, a
//! rejected connection, UD traffic after SIDR, multicast join and leave, RDMA read and
//! write through ids' regions) and the connection steps of `librdmacm/examples/cmtime.c`,
//! each run on a jitterless simulated fabric with exact virtual times.
//!
//! The two sides are two processes of the fabric, as pyverbs runs two processes; their
//! barrier (pyverbs' `syncer`) and queue (`notifier`) are `cmtwin::sync` channels.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::sync::{channel, Receiver, Sender};
use cmtwin::verbs::{
    DataPath, MemoryRegion, Payload, QpInitAttrEx, QpState, RecvWr, SendFlags, SendOp, SendWr,
    WcStatus, WorkCompletion, GRH_LEN, MULTICAST_QPN,
};
use cmtwin::{
    AddrInfo, ChannelHandle, CmBackend, CmOption, ConnData, ConnParam, EventInfo, EventKind,
    EventParam, IdHandle, JoinFlags, PortSpace, QpInitAttr, QpType, Result, Transport, Wait,
};
use cmtwin_sim::{Fabric, SimBackend, SimConfig};

const SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// pyverbs' CMResources: port 7471, ten messages of 1024 bytes.
const PORT: u16 = 7471;
const MSG_SIZE: usize = 1024;
const NUM_MSGS: usize = 10;
const GRH: usize = GRH_LEN as usize;
const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));
/// rdmacm_utils' REJECT_MSG.
const REJECT_MSG: &[u8] = b"connection rejected";

/// A two-host fabric of `transport` whose wire has no jitter.
fn fabric(seed: u64, transport: Transport) -> Fabric {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    Fabric::builder(seed)
        .config(config)
        .host("server", transport, &[SERVER_IP])
        .host("client", transport, &[CLIENT_IP])
        .build()
        .expect("a valid configuration")
}

fn server_addr() -> SocketAddr {
    SocketAddr::new(SERVER_IP, PORT)
}

/// pyverbs' `syncer` (a barrier of two) and `notifier` (a queue of values) for one side.
struct Sync2 {
    barrier_out: Sender<()>,
    barrier_in: Receiver<()>,
    queue_out: Sender<u64>,
    queue_in: Receiver<u64>,
}

impl Sync2 {
    fn pair() -> (Sync2, Sync2) {
        let (ab_tx, ab_rx) = channel();
        let (ba_tx, ba_rx) = channel();
        let (aq_tx, aq_rx) = channel();
        let (bq_tx, bq_rx) = channel();
        (
            Sync2 {
                barrier_out: ab_tx,
                barrier_in: ba_rx,
                queue_out: aq_tx,
                queue_in: bq_rx,
            },
            Sync2 {
                barrier_out: ba_tx,
                barrier_in: ab_rx,
                queue_out: bq_tx,
                queue_in: aq_rx,
            },
        )
    }

    /// Both sides reach this point before either goes on.
    fn wait(&self) -> Result<()> {
        self.barrier_out.send(())?;
        self.barrier_in.recv()
    }

    fn put(&self, value: u64) -> Result<()> {
        self.queue_out.send(value)
    }

    fn get(&self) -> Result<u64> {
        self.queue_in.recv()
    }
}

/// rdmacm_utils' `event_handler(expected_event=kind)`: fetch, check, acknowledge.
fn expect(cm: &SimBackend, channel: ChannelHandle, kind: EventKind) -> Result<EventInfo> {
    let event = cm.get_cm_event(channel, WAIT)?;
    let info = event.info().clone();
    cm.ack_cm_event(event)?;
    assert_eq!(
        info.kind, kind,
        "expected {kind}, got {} (status {})",
        info.kind, info.status
    );
    Ok(info)
}

/// The connection data of a connection event.
fn conn_of(info: &EventInfo) -> ConnData {
    match info.conn() {
        Some(conn) => *conn,
        None => panic!(
            "{} carries {:?}, not connection data",
            info.kind, info.param
        ),
    }
}

/// A listener of port space `ps` on the server's address, with its own event channel (the
/// server side of every flow here).
fn listener(cm: &SimBackend, ps: PortSpace) -> Result<(ChannelHandle, IdHandle)> {
    let channel = cm.create_event_channel()?;
    let listen = cm.create_id(Some(channel), 0, ps)?;
    cm.bind_addr(listen, server_addr())?;
    cm.listen(listen, 0)?;
    Ok((channel, listen))
}

/// Times and facts a side records, checked after the run.
type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, cm: &SimBackend, what: &str) {
    log.lock().unwrap().push(format!("{:?} {what}", cm.now()));
}

/// Runs `server` and `client` (which starts 1 ms later) on `fabric`; returns each side's log.
fn run_pair(
    fabric: &Fabric,
    server: impl FnOnce(&SimBackend, &Sync2, &Log) -> Result<()> + Send + 'static,
    client: impl FnOnce(&SimBackend, &Sync2, &Log) -> Result<()> + Send + 'static,
) -> (Vec<String>, Vec<String>) {
    let (s_sync, c_sync) = Sync2::pair();
    let (s_log, c_log): (Log, Log) = Default::default();
    let (s_log2, c_log2) = (s_log.clone(), c_log.clone());
    fabric.spawn("server", "server", move |cm| server(&cm, &s_sync, &s_log2));
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(Duration::from_millis(1))?;
        client(&cm, &c_sync, &c_log2)
    });
    if let Err(e) = fabric.run() {
        panic!("{e}\n{}", fabric.trace_text());
    }
    if std::env::var_os("SHOW_TRACE").is_some() {
        eprintln!("{}", fabric.trace_text());
    }
    let s = s_log.lock().unwrap().clone();
    let c = c_log.lock().unwrap().clone();
    (s, c)
}

/// pyverbs' `create_qp_init_attr`: the port space's QP type, one receive.
fn qp_init(qp_type: QpType) -> QpInitAttr {
    let mut attr = QpInitAttr::new(qp_type);
    attr.cap.max_recv_wr = 1;
    attr
}

/// The message each side sends: `fill` repeated.
fn message(fill: u8, len: usize) -> Vec<u8> {
    vec![fill; len]
}

/// Checks that `bytes` are all `fill`, naming the first that is not.
fn assert_filled(bytes: &[u8], fill: u8) {
    if let Some(at) = bytes.iter().position(|&b| b != fill) {
        panic!(
            "byte {at} of {} is {:?}, not {:?}",
            bytes.len(),
            bytes[at] as char,
            fill as char
        );
    }
}

/// Reads `len` bytes of `mr` from `offset`.
fn read(cm: &SimBackend, mr: &MemoryRegion, offset: usize, len: usize) -> Result<Vec<u8>> {
    let mut out = vec![0; len];
    cm.mr_read(mr.handle, offset, &mut out)?;
    Ok(out)
}

// ----- test_rdmacm_async_traffic -------------------------------------------------------

/// The passive side of CMAsyncConnection on RDMA_PS_TCP: listen, accept the request with a
/// QP of the CM, then ten messages received and answered through the id's helpers.
fn async_rc_server(cm: &SimBackend, sync: &Sync2, log: &Log) -> Result<()> {
    let (channel, listen) = listener(cm, PortSpace::TCP)?;
    sync.wait()?;
    let request = expect(cm, channel, EventKind::ConnectRequest)?;
    let child = request.id;
    cm.create_qp(child, &qp_init(QpType::Rc))?;
    cm.accept(child, Some(&ConnParam::default()))?;
    expect(cm, channel, EventKind::Established)?;
    note(log, cm, "established");
    let mr = cm.reg_msgs(child, vec![0; MSG_SIZE + GRH])?;
    exchange_qp_numbers(cm, sync, child, true)?;
    for _ in 0..NUM_MSGS {
        cm.post_recv_msg(child, 1, &mr, 0, MSG_SIZE as u32)?;
        sync.wait()?;
        sync.wait()?;
        let wc = cm.get_recv_comp(child)?;
        assert_eq!(wc.byte_len, MSG_SIZE as u32);
        assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b'c');
        cm.mr_write(mr.handle, 0, &message(b's', MSG_SIZE))?;
        cm.post_send_msg(child, 2, &mr, 0, MSG_SIZE as u32, SendFlags::SIGNALED)?;
        cm.get_send_comp(child)?;
        sync.wait()?;
    }
    note(log, cm, "traffic done");
    cm.disconnect(child)?;
    expect(cm, channel, EventKind::Disconnected)?;
    note(log, cm, "disconnected");
    cm.dereg_mr(mr.handle)?;
    cm.destroy_qp(child)?;
    cm.destroy_id(child)?;
    cm.destroy_id(listen)?;
    cm.destroy_event_channel(channel)
}

/// pyverbs' `sync_qp_numbers`: each side learns the other's QP number through the queue.
fn exchange_qp_numbers(cm: &SimBackend, sync: &Sync2, id: IdHandle, passive: bool) -> Result<u32> {
    let mine = cm.qp_num(id)?.expect("the id has a QP");
    if passive {
        sync.wait()?;
        sync.put(u64::from(mine))?;
        sync.wait()?;
        Ok(sync.get()? as u32)
    } else {
        sync.wait()?;
        let theirs = sync.get()? as u32;
        sync.put(u64::from(mine))?;
        sync.wait()?;
        Ok(theirs)
    }
}

/// The active side: resolve, route, the ACK timeout option (test_rdmacm's `qp_timeout=21`),
/// a QP of the CM, connect, then ten messages sent and answers received.
fn async_rc_client(cm: &SimBackend, sync: &Sync2, log: &Log) -> Result<()> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.resolve_addr(
        id,
        Some(SocketAddr::new(CLIENT_IP, 0)),
        server_addr(),
        Duration::from_millis(2000),
    )?;
    expect(cm, channel, EventKind::AddrResolved)?;
    sync.wait()?;
    cm.resolve_route(id, Duration::from_millis(2000))?;
    expect(cm, channel, EventKind::RouteResolved)?;
    cm.set_option(id, &CmOption::AckTimeout(21))?;
    cm.create_qp(id, &qp_init(QpType::Rc))?;
    cm.connect(id, Some(&ConnParam::default()))?;
    let established = expect(cm, channel, EventKind::Established)?;
    note(log, cm, "established");
    let mr = cm.reg_msgs(id, vec![0; MSG_SIZE + GRH])?;
    let server_qpn = exchange_qp_numbers(cm, sync, id, false)?;
    assert_eq!(
        established.param,
        EventParam::Conn(ConnData {
            qp_num: server_qpn,
            ..conn_of(&established)
        }),
        "ESTABLISHED names the server's QP"
    );
    let timeout = cm.init_qp_attr(id, QpState::Rts)?.timeout;
    assert_eq!(timeout, 21, "the ACK timeout set by rdma_set_option");
    for _ in 0..NUM_MSGS {
        cm.mr_write(mr.handle, 0, &message(b'c', MSG_SIZE))?;
        sync.wait()?;
        cm.post_send_msg(id, 3, &mr, 0, MSG_SIZE as u32, SendFlags::SIGNALED)?;
        cm.get_send_comp(id)?;
        cm.post_recv_msg(id, 4, &mr, 0, MSG_SIZE as u32)?;
        sync.wait()?;
        sync.wait()?;
        let wc = cm.get_recv_comp(id)?;
        assert_eq!(wc.byte_len, MSG_SIZE as u32);
        assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b's');
    }
    note(log, cm, "traffic done");
    expect(cm, channel, EventKind::Disconnected)?;
    cm.disconnect(id)?;
    note(log, cm, "disconnected");
    cm.dereg_mr(mr.handle)?;
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)
}

#[test]
fn async_traffic_ten_messages_over_a_qp_of_the_cm() {
    let fabric = fabric(1, Transport::Roce);
    let (s, c) = run_pair(&fabric, async_rc_server, async_rc_client);
    assert_eq!(
        s,
        [
            "1.025ms established",
            "1.225ms traffic done",
            "1.275ms disconnected"
        ]
    );
    assert_eq!(
        c,
        [
            "1.02ms established",
            "1.225ms traffic done",
            "1.27ms disconnected"
        ]
    );
}

// ----- test_rdmacm_async_reject_traffic --------------------------------------------------

#[test]
fn async_reject_reaches_the_client_with_its_message() {
    let fabric = fabric(2, Transport::Roce);
    let server = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let (channel, listen) = listener(cm, PortSpace::TCP)?;
        sync.wait()?;
        let child = expect(cm, channel, EventKind::ConnectRequest)?.id;
        cm.reject(child, REJECT_MSG)?;
        note(log, cm, "rejected");
        cm.destroy_id(child)?;
        cm.destroy_id(listen)?;
        cm.destroy_event_channel(channel)
    };
    let client = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.resolve_addr(id, None, server_addr(), Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::AddrResolved)?;
        sync.wait()?;
        cm.resolve_route(id, Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::RouteResolved)?;
        cm.create_qp(id, &qp_init(QpType::Rc))?;
        cm.connect(id, Some(&ConnParam::default()))?;
        let rejected = expect(cm, channel, EventKind::Rejected)?;
        note(log, cm, &format!("rejected status {}", rejected.status));
        assert_eq!(&rejected.private_data[..REJECT_MSG.len()], REJECT_MSG);
        cm.destroy_qp(id)?;
        cm.destroy_id(id)?;
        cm.destroy_event_channel(channel)
    };
    let (s, c) = run_pair(&fabric, server, client);
    assert_eq!(s, ["1.015ms rejected"]);
    // IB_CM_REJ_CONSUMER_DEFINED (28): the status a consumer's reject carries.
    assert_eq!(c, ["1.02ms rejected status 28"]);
}

// ----- test_rdmacm_async_traffic_external_qp ---------------------------------------------

/// pyverbs' external QP: a CQ of ten entries and an RC QP of the id's PD, in RESET; its
/// number goes in the connection parameters and `init_qp_attr` drives it to RTS.
struct ExtQp {
    cq: cmtwin::CqHandle,
    qp: cmtwin::QpHandle,
    num: u32,
}

fn ext_qp(cm: &SimBackend, id: IdHandle) -> Result<ExtQp> {
    // pyverbs' `cmid.pd`: librdmacm's `id->pd`, the device's PD, which `reg_msgs` uses too.
    let pd = cm.pd(id)?;
    let cq = cm.create_cq(id, NUM_MSGS as u32, None)?;
    let mut attr = QpInitAttrEx::rc(pd, cq, cq);
    attr.cap.max_recv_wr = 1;
    let qp = cm.create_external_qp(&attr)?;
    let num = cm.qp_number(qp)?;
    Ok(ExtQp { cq, qp, num })
}

fn modify_ext_qp_to_rts(cm: &SimBackend, id: IdHandle, qp: &ExtQp) -> Result<()> {
    for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let attr = cm.init_qp_attr(id, state)?;
        cm.modify_qp(qp.qp, &attr)?;
    }
    assert_eq!(cm.query_qp_state(qp.qp)?, QpState::Rts);
    Ok(())
}

/// pyverbs' `poll_cq`: spin on the CQ until one completion comes; it must be a success.
fn poll_one(cm: &SimBackend, cq: cmtwin::CqHandle) -> Result<WorkCompletion> {
    let mut wc = [WorkCompletion::default()];
    loop {
        if cm.poll_cq(cq, &mut wc)? == 1 {
            assert_eq!(wc[0].status, WcStatus::SUCCESS, "completion {:?}", wc[0]);
            return Ok(wc[0]);
        }
        cm.spin(None)?;
    }
}

fn ext_post_recv(cm: &SimBackend, qp: &ExtQp, mr: &MemoryRegion) -> Result<()> {
    let sge = [mr.sge(0, MSG_SIZE as u32)];
    cm.post_recv(
        qp.qp,
        &RecvWr {
            wr_id: 1,
            sg_list: &sge,
        },
    )
}

fn ext_post_send(cm: &SimBackend, qp: &ExtQp, mr: &MemoryRegion) -> Result<()> {
    let sge = [mr.sge(0, MSG_SIZE as u32)];
    cm.post_send(qp.qp, &SendWr::new(2, SendOp::Send, Payload::Sges(&sge)))
}

#[test]
fn async_traffic_over_an_external_qp_moved_by_init_qp_attr() {
    let fabric = fabric(3, Transport::Roce);
    let server = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let (channel, _listen) = listener(cm, PortSpace::TCP)?;
        sync.wait()?;
        let request = expect(cm, channel, EventKind::ConnectRequest)?;
        let child = request.id;
        let qp = ext_qp(cm, child)?;
        let param = ConnParam {
            qp_num: qp.num,
            ..ConnParam::default()
        };
        cm.accept(child, Some(&param))?;
        modify_ext_qp_to_rts(cm, child, &qp)?;
        expect(cm, channel, EventKind::Established)?;
        note(log, cm, "established");
        let mr = cm.reg_msgs(child, vec![0; MSG_SIZE + GRH])?;
        sync.wait()?;
        sync.put(u64::from(qp.num))?;
        sync.wait()?;
        let peer = sync.get()? as u32;
        let named = conn_of(&request).qp_num;
        assert_eq!(named, peer, "CONNECT_REQUEST names the client's QP");
        ext_post_recv(cm, &qp, &mr)?;
        sync.wait()?;
        for _ in 0..NUM_MSGS {
            let wc = poll_one(cm, qp.cq)?;
            assert_eq!((wc.qp_num, wc.byte_len), (qp.num, MSG_SIZE as u32));
            ext_post_recv(cm, &qp, &mr)?;
            assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b'c');
            cm.mr_write(mr.handle, 0, &message(b's', MSG_SIZE))?;
            ext_post_send(cm, &qp, &mr)?;
            poll_one(cm, qp.cq)?;
        }
        note(log, cm, "traffic done");
        cm.disconnect(child)?;
        note(log, cm, &format!("qp {:?}", cm.query_qp_state(qp.qp)?));
        Ok(())
    };
    let client = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.resolve_addr(id, None, server_addr(), Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::AddrResolved)?;
        sync.wait()?;
        cm.resolve_route(id, Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::RouteResolved)?;
        let qp = ext_qp(cm, id)?;
        let param = ConnParam {
            qp_num: qp.num,
            ..ConnParam::default()
        };
        cm.connect(id, Some(&param))?;
        let response = expect(cm, channel, EventKind::ConnectResponse)?;
        modify_ext_qp_to_rts(cm, id, &qp)?;
        cm.establish(id)?;
        note(log, cm, "established");
        let mr = cm.reg_msgs(id, vec![0; MSG_SIZE + GRH])?;
        sync.wait()?;
        let peer = sync.get()? as u32;
        assert_eq!(
            conn_of(&response).qp_num,
            peer,
            "CONNECT_RESPONSE names the server's QP"
        );
        sync.put(u64::from(qp.num))?;
        sync.wait()?;
        sync.wait()?;
        for _ in 0..NUM_MSGS {
            cm.mr_write(mr.handle, 0, &message(b'c', MSG_SIZE))?;
            ext_post_send(cm, &qp, &mr)?;
            poll_one(cm, qp.cq)?;
            ext_post_recv(cm, &qp, &mr)?;
            let wc = poll_one(cm, qp.cq)?;
            assert_eq!((wc.qp_num, wc.byte_len), (qp.num, MSG_SIZE as u32));
            assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b's');
        }
        note(log, cm, "traffic done");
        expect(cm, channel, EventKind::Disconnected)?;
        note(log, cm, "disconnected");
        cm.disconnect(id)?;
        Ok(())
    };
    let (s, c) = run_pair(&fabric, server, client);
    // Every answer of the server finds the client's receive not yet posted (the client
    // posts it after its send completes, as upstream's does): the kernel CM's RTR attributes
    // carry min_rnr_timer 0, which is 655.36 ms (cm.c cm_init_qp_rtr_attr), so each of the
    // ten answers waits one RNR NAK timer. rdma_disconnect leaves the external QP alone.
    assert_eq!(
        s,
        [
            "1.025ms established",
            "6.554875s traffic done",
            "6.554875s qp Rts"
        ]
    );
    assert_eq!(
        c,
        [
            "1.02ms established",
            "6.554875s traffic done",
            "6.55488s disconnected"
        ]
    );
}

// ----- test_rdmacm_async_udp_traffic -----------------------------------------------------

#[test]
fn async_udp_traffic_answers_through_an_address_handle_from_the_receive() {
    let fabric = fabric(4, Transport::Roce);
    let server = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let (channel, _listen) = listener(cm, PortSpace::UDP)?;
        sync.wait()?;
        let child = expect(cm, channel, EventKind::ConnectRequest)?.id;
        cm.create_qp(child, &qp_init(QpType::Ud))?;
        cm.accept(child, Some(&ConnParam::default()))?;
        note(log, cm, "accepted");
        let mr = cm.reg_msgs(child, vec![0; MSG_SIZE + GRH])?;
        let peer = exchange_qp_numbers(cm, sync, child, true)?;
        let pd = cm.pd(child)?;
        for _ in 0..NUM_MSGS {
            cm.post_recv_msg(child, 1, &mr, 0, (MSG_SIZE + GRH) as u32)?;
            sync.wait()?;
            sync.wait()?;
            let wc = cm.get_recv_comp(child)?;
            assert_eq!((wc.src_qp, wc.byte_len), (peer, (MSG_SIZE + GRH) as u32));
            assert_filled(&read(cm, &mr, GRH, MSG_SIZE)?, b'c');
            let grh: [u8; GRH] = read(cm, &mr, 0, GRH)?.try_into().unwrap();
            let ah = cm.create_ah_from_wc(pd, &wc, &grh)?;
            cm.mr_write(mr.handle, 0, &message(b's', MSG_SIZE + GRH))?;
            cm.post_ud_send(
                child,
                2,
                &mr,
                0,
                MSG_SIZE as u32,
                SendFlags::SIGNALED,
                ah,
                peer,
            )?;
            cm.get_send_comp(child)?;
            cm.destroy_ah(ah)?;
            sync.wait()?;
        }
        note(log, cm, "traffic done");
        Ok(())
    };
    let client = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let id = cm.create_id(Some(channel), 0, PortSpace::UDP)?;
        cm.resolve_addr(id, None, server_addr(), Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::AddrResolved)?;
        sync.wait()?;
        cm.resolve_route(id, Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::RouteResolved)?;
        cm.create_qp(id, &qp_init(QpType::Ud))?;
        cm.connect(id, Some(&ConnParam::default()))?;
        let established = expect(cm, channel, EventKind::Established)?;
        note(log, cm, "established");
        let Some(&ud) = established.ud() else {
            panic!("ESTABLISHED of a UD id carries {:?}", established.param)
        };
        let mr = cm.reg_msgs(id, vec![0; MSG_SIZE + GRH])?;
        let peer = exchange_qp_numbers(cm, sync, id, false)?;
        assert_eq!((ud.qp_num, ud.qkey), (peer, cmtwin::RDMA_UDP_QKEY));
        let ah = cm.create_ah(cm.pd(id)?, &ud.ah_attr)?;
        for _ in 0..NUM_MSGS {
            cm.mr_write(mr.handle, 0, &message(b'c', MSG_SIZE + GRH))?;
            sync.wait()?;
            cm.post_ud_send(
                id,
                3,
                &mr,
                0,
                MSG_SIZE as u32,
                SendFlags::SIGNALED,
                ah,
                ud.qp_num,
            )?;
            cm.get_send_comp(id)?;
            cm.post_recv_msg(id, 4, &mr, 0, (MSG_SIZE + GRH) as u32)?;
            sync.wait()?;
            sync.wait()?;
            let wc = cm.get_recv_comp(id)?;
            assert_eq!(wc.byte_len, (MSG_SIZE + GRH) as u32);
            assert_filled(&read(cm, &mr, GRH, MSG_SIZE)?, b's');
        }
        note(log, cm, "traffic done");
        Ok(())
    };
    let (s, c) = run_pair(&fabric, server, client);
    // SIDR: the server answers at once; ten exchanges of 10 µs each (no ACKs on UD).
    assert_eq!(s, ["1.015ms accepted", "1.115ms traffic done"]);
    assert_eq!(c, ["1.02ms established", "1.12ms traffic done"]);
}

// ----- test_rdmacm_async_{,ex_}multicast_traffic, ex_leave ---------------------------------

fn group() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(230, 0, 0, 1)), 0)
}

/// rdmacm_utils' `join_to_multicast`: bind, resolve the group, a UD QP, join; returns the id
/// and the group's datagram data.
fn join_group(
    cm: &SimBackend,
    channel: ChannelHandle,
    src: SocketAddr,
    extended: bool,
) -> Result<(IdHandle, cmtwin::UdData)> {
    let id = cm.create_id(Some(channel), 0, PortSpace::UDP)?;
    cm.bind_addr(id, src)?;
    cm.resolve_addr(
        id,
        Some(SocketAddr::new(src.ip(), 0)),
        group(),
        Duration::from_millis(2000),
    )?;
    expect(cm, channel, EventKind::AddrResolved)?;
    cm.create_qp(id, &qp_init(QpType::Ud))?;
    if extended {
        cm.join_multicast_ex(id, group(), JoinFlags::FullMember, 0)?;
    } else {
        cm.join_multicast(id, group(), 0)?;
    }
    let joined = expect(cm, channel, EventKind::MulticastJoin)?;
    let Some(&ud) = joined.ud() else {
        panic!("MULTICAST_JOIN carries {:?}", joined.param)
    };
    Ok((id, ud))
}

fn multicast_flow(seed: u64, extended: bool) -> (Vec<String>, Vec<String>) {
    let fabric = fabric(seed, Transport::Roce);
    let server = move |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let (id, ud) = join_group(cm, channel, server_addr(), extended)?;
        note(log, cm, "joined");
        assert_eq!(ud.qp_num, MULTICAST_QPN);
        let mr = cm.reg_msgs(id, vec![0; MSG_SIZE + GRH])?;
        sync.wait()?;
        let ah = cm.create_ah(cm.pd(id)?, &ud.ah_attr)?;
        for _ in 0..NUM_MSGS {
            cm.post_recv_msg(id, 1, &mr, 0, (MSG_SIZE + GRH) as u32)?;
            sync.wait()?;
            sync.wait()?;
            cm.get_recv_comp(id)?;
            assert_filled(&read(cm, &mr, GRH, MSG_SIZE)?, b'c');
            cm.mr_write(mr.handle, 0, &message(b's', MSG_SIZE + GRH))?;
            cm.post_ud_send(
                id,
                2,
                &mr,
                0,
                MSG_SIZE as u32,
                SendFlags::SIGNALED,
                ah,
                MULTICAST_QPN,
            )?;
            cm.get_send_comp(id)?;
            sync.wait()?;
        }
        note(log, cm, "traffic done");
        cm.leave_multicast(id, group())?;
        Ok(())
    };
    let client = move |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let (id, ud) = join_group(cm, channel, SocketAddr::new(CLIENT_IP, 0), extended)?;
        note(log, cm, "joined");
        let mr = cm.reg_msgs(id, vec![0; MSG_SIZE + GRH])?;
        sync.wait()?;
        let ah = cm.create_ah(cm.pd(id)?, &ud.ah_attr)?;
        for _ in 0..NUM_MSGS {
            cm.mr_write(mr.handle, 0, &message(b'c', MSG_SIZE + GRH))?;
            sync.wait()?;
            cm.post_ud_send(
                id,
                3,
                &mr,
                0,
                MSG_SIZE as u32,
                SendFlags::SIGNALED,
                ah,
                MULTICAST_QPN,
            )?;
            cm.get_send_comp(id)?;
            cm.post_recv_msg(id, 4, &mr, 0, (MSG_SIZE + GRH) as u32)?;
            sync.wait()?;
            sync.wait()?;
            cm.get_recv_comp(id)?;
            assert_filled(&read(cm, &mr, GRH, MSG_SIZE)?, b's');
        }
        note(log, cm, "traffic done");
        cm.leave_multicast(id, group())?;
        Ok(())
    };
    run_pair(&fabric, server, client)
}

// Each member's own copy of its datagram is taken before its send completes, when no
// receive is posted, so it is dropped and the next receive gets the other member's answer
// (measured on rxe-6.1); each exchange is two wire latencies.

#[test]
fn async_multicast_traffic_between_two_members() {
    let (s, c) = multicast_flow(5, false);
    assert_eq!(s, ["0ns joined", "1.095ms traffic done"]);
    assert_eq!(c, ["1ms joined", "1.1ms traffic done"]);
}

#[test]
fn async_ex_multicast_traffic_between_two_full_members() {
    let (s, c) = multicast_flow(6, true);
    assert_eq!(s, ["0ns joined", "1.095ms traffic done"]);
    assert_eq!(c, ["1ms joined", "1.1ms traffic done"]);
}

/// test_rdmacm_async_ex_leave_multicast_traffic: after the server leaves the group, the
/// client's datagram reaches the client's own receive and not the server's.
#[test]
fn async_ex_leave_multicast_stops_the_groups_datagrams() {
    let fabric = fabric(7, Transport::Roce);
    let server = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let (id, _) = join_group(cm, channel, server_addr(), true)?;
        let mr = cm.reg_msgs(id, vec![0; MSG_SIZE + GRH])?;
        cm.leave_multicast(id, group())?;
        cm.post_recv_msg(id, 1, &mr, 0, (MSG_SIZE + GRH) as u32)?;
        note(log, cm, "left");
        sync.wait()?;
        sync.wait()?;
        let err = cm
            .get_recv_comp_waiting(id, Wait::Timeout(Duration::from_millis(10)))
            .expect_err("a member that left receives nothing");
        note(log, cm, &format!("{err}"));
        Ok(())
    };
    let client = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let (id, ud) = join_group(cm, channel, SocketAddr::new(CLIENT_IP, 0), true)?;
        let mr = cm.reg_msgs(id, vec![0; 2 * (MSG_SIZE + GRH)])?;
        let ah = cm.create_ah(cm.pd(id)?, &ud.ah_attr)?;
        sync.wait()?;
        cm.post_recv_msg(id, 4, &mr, MSG_SIZE + GRH, (MSG_SIZE + GRH) as u32)?;
        cm.mr_write(mr.handle, 0, &message(b'c', MSG_SIZE))?;
        cm.post_ud_send(
            id,
            3,
            &mr,
            0,
            MSG_SIZE as u32,
            SendFlags::SIGNALED,
            ah,
            MULTICAST_QPN,
        )?;
        let own = cm.get_recv_comp(id)?;
        note(log, cm, &format!("own copy of {} bytes", own.byte_len));
        cm.get_send_comp(id)?;
        assert_filled(&read(cm, &mr, MSG_SIZE + 2 * GRH, MSG_SIZE)?, b'c');
        sync.wait()?;
        Ok(())
    };
    let (s, c) = run_pair(&fabric, server, client);
    assert_eq!(
        s,
        [
            "0ns left",
            "11ms ibv_get_cq_event: ETIMEDOUT (110): no event within the timeout"
        ]
    );
    // The client's own copy is taken as it posts the send: no time passes.
    assert_eq!(c, ["1ms own copy of 1064 bytes"]);
}

// ----- test_rdmacm_async_read / test_rdmacm_async_write ------------------------------------

/// The connected pair of the asynchronous flow, for the remote-access tests: each side's
/// id, channel and (server) listener.
fn connect_rc(cm: &SimBackend, sync: &Sync2, passive: bool) -> Result<(ChannelHandle, IdHandle)> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    if passive {
        cm.bind_addr(id, server_addr())?;
        cm.listen(id, 0)?;
        sync.wait()?;
        let child = expect(cm, channel, EventKind::ConnectRequest)?.id;
        cm.create_qp(child, &qp_init(QpType::Rc))?;
        cm.accept(child, Some(&ConnParam::default()))?;
        expect(cm, channel, EventKind::Established)?;
        return Ok((channel, child));
    }
    cm.resolve_addr(id, None, server_addr(), Duration::from_millis(2000))?;
    expect(cm, channel, EventKind::AddrResolved)?;
    sync.wait()?;
    cm.resolve_route(id, Duration::from_millis(2000))?;
    expect(cm, channel, EventKind::RouteResolved)?;
    cm.create_qp(id, &qp_init(QpType::Rc))?;
    cm.connect(id, Some(&ConnParam::default()))?;
    expect(cm, channel, EventKind::Established)?;
    Ok((channel, id))
}

/// The server's region (`reg_read` or `reg_write`), advertised to the client by address and
/// key; the client reads it or writes into it ten times.
fn remote_flow(seed: u64, write: bool) -> (Vec<String>, Vec<String>) {
    let fabric = fabric(seed, Transport::Roce);
    let server = move |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let (_, child) = connect_rc(cm, sync, true)?;
        let buffer = message(b's', MSG_SIZE + GRH);
        let mr = match write {
            true => cm.reg_write(child, buffer)?,
            false => cm.reg_read(child, buffer)?,
        };
        sync.put(mr.addr)?;
        sync.put(u64::from(mr.rkey))?;
        for _ in 0..NUM_MSGS {
            sync.wait()?;
        }
        if write {
            assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b'c');
            assert_filled(&read(cm, &mr, MSG_SIZE, GRH)?, b's');
        }
        note(log, cm, "done");
        Ok(())
    };
    let client = move |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let (_, id) = connect_rc(cm, sync, false)?;
        let (addr, rkey) = (sync.get()?, sync.get()? as u32);
        let mr = cm.reg_msgs(id, message(b'c', MSG_SIZE + GRH))?;
        for i in 0..NUM_MSGS as u64 {
            let flags = SendFlags::SIGNALED;
            match write {
                true => cm.post_write(id, i, &mr, 0, MSG_SIZE as u32, flags, addr, rkey)?,
                false => cm.post_read(id, i, &mr, 0, MSG_SIZE as u32, flags, addr, rkey)?,
            }
            let wc = cm.get_send_comp(id)?;
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::SUCCESS));
            sync.wait()?;
        }
        if !write {
            assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b's');
        }
        note(log, cm, "done");
        Ok(())
    };
    run_pair(&fabric, server, client)
}

#[test]
fn async_rdma_read_of_the_servers_region() {
    // Each read is one request and its response: 10 µs, as each write and its ACK.
    let (s, c) = remote_flow(8, false);
    assert_eq!(s, ["1.125ms done"]);
    assert_eq!(c, ["1.125ms done"]);
}

#[test]
fn async_rdma_write_into_the_servers_region() {
    let (s, c) = remote_flow(9, true);
    assert_eq!(s, ["1.125ms done"]);
    assert_eq!(c, ["1.125ms done"]);
}

// ----- test_rdmacm_sync_traffic -------------------------------------------------------------

/// CMSyncConnection: `rdma_create_ep` on both sides (a QP of one receive each), the server's
/// `rdma_get_request` and `rdma_accept(id, NULL)`, the client's `rdma_connect(id, NULL)`,
/// then the ten messages of the asynchronous flow.
#[test]
fn sync_traffic_over_endpoints_made_by_create_ep() {
    let fabric = fabric(10, Transport::Roce);
    let server = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let info = AddrInfo::new(
            cmtwin::rai::PASSIVE,
            PortSpace::TCP,
            QpType::Rc,
            Some(server_addr()),
            None,
        );
        let mut init = qp_init(QpType::Rc);
        let listen = cm.create_ep(&info, Some(&mut init))?;
        cm.listen(listen, 0)?;
        sync.wait()?;
        let child = cm.get_request(listen)?;
        note(log, cm, "request");
        cm.accept(child, None)?;
        note(log, cm, "accepted");
        let mr = cm.reg_msgs(child, vec![0; MSG_SIZE + GRH])?;
        for _ in 0..NUM_MSGS {
            cm.post_recv_msg(child, 1, &mr, 0, MSG_SIZE as u32)?;
            sync.wait()?;
            sync.wait()?;
            cm.get_recv_comp(child)?;
            assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b'c');
            cm.mr_write(mr.handle, 0, &message(b's', MSG_SIZE))?;
            cm.post_send_msg(child, 2, &mr, 0, MSG_SIZE as u32, SendFlags::SIGNALED)?;
            cm.get_send_comp(child)?;
            sync.wait()?;
        }
        cm.disconnect(child)?;
        note(log, cm, "disconnected");
        cm.dereg_mr(mr.handle)?;
        cm.destroy_ep(child)?;
        cm.destroy_ep(listen)
    };
    let client = |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let info = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(server_addr()));
        let mut init = qp_init(QpType::Rc);
        let id = cm.create_ep(&info, Some(&mut init))?;
        note(
            log,
            cm,
            &format!("endpoint, {} receive", init.cap.max_recv_wr),
        );
        sync.wait()?;
        cm.connect(id, None)?;
        note(log, cm, "connected");
        let mr = cm.reg_msgs(id, vec![0; MSG_SIZE + GRH])?;
        for _ in 0..NUM_MSGS {
            cm.mr_write(mr.handle, 0, &message(b'c', MSG_SIZE))?;
            sync.wait()?;
            cm.post_send_msg(id, 3, &mr, 0, MSG_SIZE as u32, SendFlags::SIGNALED)?;
            cm.get_send_comp(id)?;
            cm.post_recv_msg(id, 4, &mr, 0, MSG_SIZE as u32)?;
            sync.wait()?;
            sync.wait()?;
            cm.get_recv_comp(id)?;
            assert_filled(&read(cm, &mr, 0, MSG_SIZE)?, b's');
        }
        cm.disconnect(id)?;
        note(log, cm, "disconnected");
        cm.dereg_mr(mr.handle)?;
        cm.destroy_ep(id)
    };
    let (s, c) = run_pair(&fabric, server, client);
    // A synchronous accept returns with ESTABLISHED, when the RTU arrives.
    assert_eq!(
        s,
        ["1.015ms request", "1.025ms accepted", "1.25ms disconnected"]
    );
    assert_eq!(
        c,
        [
            "1.01ms endpoint, 1 receive",
            "1.02ms connected",
            "1.25ms disconnected"
        ]
    );
}

// ----- librdmacm/examples/cmtime.c -------------------------------------------------------

/// cmtime's connections per run (its default).
const CMTIME_CONNS: usize = 100;

/// cmtime's verbs resources: one PD and one CQ of one entry for all its QPs (no traffic).
struct CmtimeVerbs {
    pd: cmtwin::PdHandle,
    cq: cmtwin::CqHandle,
}

/// cmtime's `create_qp`: an external RC QP of one entry each way, or none (its "no QPs"
/// run, where the connection parameters carry made-up QP numbers from 1000).
fn cmtime_qp(
    cm: &SimBackend,
    id: IdHandle,
    verbs: &mut Option<CmtimeVerbs>,
    with_qps: bool,
) -> Result<Option<cmtwin::QpHandle>> {
    if !with_qps {
        return Ok(None);
    }
    if verbs.is_none() {
        let pd = cm.alloc_pd(id)?;
        let cq = cm.create_cq(id, 1, None)?;
        *verbs = Some(CmtimeVerbs { pd, cq });
    }
    let v = verbs.as_ref().expect("made above");
    let mut attr = QpInitAttrEx::rc(v.pd, v.cq, v.cq);
    attr.cap = cmtwin::QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    Ok(Some(cm.create_external_qp(&attr)?))
}

/// cmtime's `modify_qp`: the id's attributes for `state`, applied to the QP if there is one.
fn cmtime_modify(
    cm: &SimBackend,
    id: IdHandle,
    qp: Option<cmtwin::QpHandle>,
    state: QpState,
) -> Result<()> {
    let attr = cm.init_qp_attr(id, state)?;
    match qp {
        Some(qp) => cm.modify_qp(qp, &attr),
        None => Ok(()),
    }
}

/// cmtime's `init_conn_param`.
fn cmtime_param(cm: &SimBackend, qp: Option<cmtwin::QpHandle>, fake_qpn: u32) -> Result<ConnParam> {
    Ok(ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 0,
        rnr_retry_count: 0,
        qp_num: match qp {
            Some(qp) => cm.qp_number(qp)?,
            None => fake_qpn,
        },
        ..ConnParam::default()
    })
}

/// Fetches events until `count` of `kind` came, handing each to `on` (cmtime's event thread).
fn cmtime_events(
    cm: &SimBackend,
    channel: ChannelHandle,
    kind: EventKind,
    count: usize,
    mut on: impl FnMut(&EventInfo) -> Result<()>,
) -> Result<()> {
    let mut seen = 0;
    while seen < count {
        let event = cm.get_cm_event(channel, WAIT)?;
        let info = event.info().clone();
        cm.ack_cm_event(event)?;
        match info.kind {
            k if k == kind => seen += 1,
            EventKind::TimewaitExit | EventKind::Disconnected => {}
            other => panic!("cmtime: unexpected {other} (status {})", info.status),
        }
        on(&info)?;
    }
    Ok(())
}

/// cmtime's `client_connect`: each step over every connection, the time each step ends.
fn cmtime_client(cm: &SimBackend, sync: &Sync2, log: &Log, with_qps: bool) -> Result<()> {
    let channel = cm.create_event_channel()?;
    let src = SocketAddr::new(CLIENT_IP, 0);
    let ids = (0..CMTIME_CONNS)
        .map(|i| cm.create_id(Some(channel), i as u64, PortSpace::TCP))
        .collect::<Result<Vec<_>>>()?;
    for &id in &ids {
        cm.bind_addr(id, src)?;
    }
    for &id in &ids {
        cm.resolve_addr(id, Some(src), server_addr(), Duration::from_millis(2000))?;
    }
    cmtime_events(cm, channel, EventKind::AddrResolved, CMTIME_CONNS, |_| {
        Ok(())
    })?;
    note(log, cm, "resolve addr");
    for &id in &ids {
        cm.resolve_route(id, Duration::from_millis(2000))?;
    }
    cmtime_events(cm, channel, EventKind::RouteResolved, CMTIME_CONNS, |_| {
        Ok(())
    })?;
    note(log, cm, "resolve route");
    let mut verbs = None;
    let qps = ids
        .iter()
        .map(|&id| cmtime_qp(cm, id, &mut verbs, with_qps))
        .collect::<Result<Vec<_>>>()?;
    for (&id, &qp) in ids.iter().zip(&qps) {
        cmtime_modify(cm, id, qp, QpState::Init)?;
    }
    for (i, (&id, &qp)) in ids.iter().zip(&qps).enumerate() {
        cm.connect(id, Some(&cmtime_param(cm, qp, 1000 + i as u32)?))?;
    }
    cmtime_events(cm, channel, EventKind::ConnectResponse, CMTIME_CONNS, |e| {
        let qp = qps[cm.context(e.id)? as usize];
        cmtime_modify(cm, e.id, qp, QpState::Rtr)?;
        cmtime_modify(cm, e.id, qp, QpState::Rts)?;
        cm.establish(e.id)
    })?;
    note(log, cm, "connect");
    sync.wait()?;
    for &id in &ids {
        cm.disconnect(id)?;
    }
    note(log, cm, "disconnect");
    cmtime_events(cm, channel, EventKind::Disconnected, CMTIME_CONNS, |e| {
        cm.disconnect(e.id)
    })?;
    note(log, cm, "disconnected");
    sync.wait()?;
    for qp in qps.into_iter().flatten() {
        cm.destroy_external_qp(qp)?;
    }
    for id in ids {
        cm.destroy_id(id)?;
    }
    if let Some(v) = verbs {
        cm.destroy_cq(v.cq)?;
        cm.dealloc_pd(v.pd)?;
    }
    cm.destroy_event_channel(channel)
}

/// cmtime's server: QPs moved to RTS before the accept, a disconnect for each DISCONNECTED.
fn cmtime_server(cm: &SimBackend, sync: &Sync2, log: &Log, with_qps: bool) -> Result<()> {
    let (channel, listen) = listener(cm, PortSpace::TCP)?;
    let (mut ids, mut qps, mut verbs) = (Vec::new(), Vec::new(), None);
    let mut on_request = |e: &EventInfo| -> Result<()> {
        let qp = cmtime_qp(cm, e.id, &mut verbs, with_qps)?;
        for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
            cmtime_modify(cm, e.id, qp, state)?;
        }
        cm.accept(e.id, Some(&cmtime_param(cm, qp, 5000 + ids.len() as u32)?))?;
        ids.push(e.id);
        qps.push(qp);
        Ok(())
    };
    cmtime_events(
        cm,
        channel,
        EventKind::ConnectRequest,
        CMTIME_CONNS,
        &mut on_request,
    )?;
    note(log, cm, "requests");
    cmtime_events(
        cm,
        channel,
        EventKind::Established,
        CMTIME_CONNS,
        |_| Ok(()),
    )?;
    note(log, cm, "established");
    sync.wait()?;
    cmtime_events(cm, channel, EventKind::Disconnected, CMTIME_CONNS, |e| {
        cm.disconnect(e.id)
    })?;
    note(log, cm, "disconnected");
    sync.wait()?;
    for qp in qps.into_iter().flatten() {
        cm.destroy_external_qp(qp)?;
    }
    for id in ids {
        cm.destroy_id(id)?;
    }
    if let Some(v) = verbs {
        cm.destroy_cq(v.cq)?;
        cm.dealloc_pd(v.pd)?;
    }
    cm.destroy_id(listen)?;
    cm.destroy_event_channel(channel)
}

/// The client's steps, each ending for all hundred connections at once: the simulator
/// charges no time to a call, so every step costs its messages' latency (5 µs a message,
/// 10 µs for the address, the route at once on RoCE) and nothing per connection. The
/// disconnect is the client's DREQ and the server's DREP after its own rdma_disconnect.
const CMTIME_CLIENT_STEPS: [&str; 5] = [
    "1.01ms resolve addr",
    "1.01ms resolve route",
    "1.02ms connect",
    "1.025ms disconnect",
    "1.035ms disconnected",
];

/// The server's steps of both cmtime runs.
const CMTIME_SERVER_STEPS: [&str; 3] = [
    "1.015ms requests",
    "1.025ms established",
    "1.03ms disconnected",
];

/// Runs cmtime's server and client on a fresh fabric of `seed`, with QPs or without, and
/// checks both sides' steps.
fn cmtime_takes_its_steps(seed: u64, with_qps: bool) {
    let fabric = fabric(seed, Transport::Roce);
    let (s, c) = run_pair(
        &fabric,
        move |cm, sync, log| cmtime_server(cm, sync, log, with_qps),
        move |cm, sync, log| cmtime_client(cm, sync, log, with_qps),
    );
    assert_eq!(s, CMTIME_SERVER_STEPS);
    assert_eq!(c, CMTIME_CLIENT_STEPS);
}

#[test]
fn cmtime_connects_and_disconnects_a_hundred_qps() {
    cmtime_takes_its_steps(11, true);
}

#[test]
fn cmtime_connects_and_disconnects_a_hundred_ids_without_qps() {
    cmtime_takes_its_steps(12, false);
}

// ----- rdma_init_qp_attr's values, as cmtime and the external-QP flow take them -------------

/// What `init_qp_attr` gives for INIT (access), RTR (max_dest_rd_atomic) and RTS
/// (max_rd_atomic) on each side of a connection whose client offers `client` and server
/// `server` (responder resources, initiator depth), with the resources the CONNECT_REQUEST
/// and CONNECT_RESPONSE show, as rxe-6.1 gave them (measured: access 0x0 before
/// rdma_connect, 0xe with resources, 0x2 without; the resources in RTR and RTS).
fn qp_attrs_seen(seed: u64, client: (u8, u8), server: (u8, u8)) -> (Vec<String>, Vec<String>) {
    let fabric = fabric(seed, Transport::Roce);
    let param = ConnParam {
        responder_resources: client.0,
        initiator_depth: client.1,
        retry_count: 7,
        rnr_retry_count: 7,
        qp_num: 1234,
        ..ConnParam::default()
    };
    let server_param = ConnParam {
        responder_resources: server.0,
        initiator_depth: server.1,
        qp_num: 4321,
        ..param.clone()
    };
    let resources = |e: &EventInfo| {
        let c = e.conn().expect("a connection's event");
        format!("(rr {} id {})", c.responder_resources, c.initiator_depth)
    };
    let show = |cm: &SimBackend, log: &Log, what: &str, id: IdHandle| -> Result<()> {
        let init = cm.init_qp_attr(id, QpState::Init)?.access;
        let rtr = cm
            .init_qp_attr(id, QpState::Rtr)
            .map(|a| a.max_dest_rd_atomic);
        let rts = cm.init_qp_attr(id, QpState::Rts).map(|a| a.max_rd_atomic);
        let (rtr, rts) = (rtr.ok(), rts.ok());
        note(
            log,
            cm,
            &format!("{what}: access {:#x} rtr {rtr:?} rts {rts:?}", init.0),
        );
        Ok(())
    };
    let server = move |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let (channel, _listen) = listener(cm, PortSpace::TCP)?;
        sync.wait()?;
        let request = expect(cm, channel, EventKind::ConnectRequest)?;
        let child = request.id;
        show(cm, log, &format!("request {}", resources(&request)), child)?;
        cm.accept(child, Some(&server_param))?;
        show(cm, log, "accepted", child)?;
        sync.wait()
    };
    let client = move |cm: &SimBackend, sync: &Sync2, log: &Log| -> Result<()> {
        let channel = cm.create_event_channel()?;
        let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.resolve_addr(id, None, server_addr(), Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::AddrResolved)?;
        cm.resolve_route(id, Duration::from_millis(2000))?;
        expect(cm, channel, EventKind::RouteResolved)?;
        show(cm, log, "route", id)?;
        sync.wait()?;
        cm.connect(id, Some(&param))?;
        show(cm, log, "req sent", id)?;
        let response = expect(cm, channel, EventKind::ConnectResponse)?;
        show(cm, log, &format!("response {}", resources(&response)), id)?;
        sync.wait()
    };
    run_pair(&fabric, server, client)
}

#[test]
fn init_qp_attr_gives_the_cms_access_and_read_depths() {
    let (s, c) = qp_attrs_seen(13, (1, 1), (1, 1));
    assert_eq!(
        s,
        [
            "1.015ms request (rr 1 id 1): access 0xe rtr Some(1) rts Some(1)",
            "1.015ms accepted: access 0xe rtr Some(1) rts Some(1)"
        ]
    );
    // Before a REP the active id has no RTR or RTS attributes (EINVAL, cm.c REQ_SENT).
    assert_eq!(
        c,
        [
            "1.01ms route: access 0x0 rtr None rts None",
            "1.01ms req sent: access 0xe rtr None rts None",
            "1.02ms response (rr 1 id 1): access 0xe rtr Some(1) rts Some(1)"
        ]
    );
    let (s, c) = qp_attrs_seen(14, (0, 0), (0, 0));
    assert_eq!(
        s,
        [
            "1.015ms request (rr 0 id 0): access 0x2 rtr Some(0) rts Some(0)",
            "1.015ms accepted: access 0x2 rtr Some(0) rts Some(0)"
        ]
    );
    assert_eq!(
        c,
        [
            "1.01ms route: access 0x0 rtr None rts None",
            "1.01ms req sent: access 0x2 rtr None rts None",
            "1.02ms response (rr 0 id 0): access 0x2 rtr Some(0) rts Some(0)"
        ]
    );
}

/// Responder resources and initiator depth, as a side offers them.
type Offer = (u8, u8);

/// Each side's QP takes its own responder resources (RTR) and initiator depth (RTS), the
/// active side's from the REP as the CONNECT_RESPONSE shows them (already its own side's:
/// the peer's responder resources are its initiator depth), an accept's explicit values not
/// bounded by the request's, RDMA_MAX_RESP_RES the request's (or the device's 128).
/// Measured on rxe-6.1 with a C probe (every RTR and RTS value after the response and after
/// the accept, the RTR value on the request, and the events' resources, for these four
/// offers); the passive RTS value before the accept is read (cm.c's `initiator_depth`).
#[test]
fn init_qp_attr_gives_each_side_its_own_resources_when_the_offers_differ() {
    let max = cmtwin::RDMA_MAX_RESP_RES;
    let cases: [(Offer, Offer, [&str; 2], &str); 4] = [
        (
            (3, 5),
            (2, 1),
            [
                "1.015ms request (rr 5 id 3): access 0xe rtr Some(5) rts Some(3)",
                "1.015ms accepted: access 0xe rtr Some(2) rts Some(1)",
            ],
            "1.02ms response (rr 1 id 2): access 0xe rtr Some(1) rts Some(2)",
        ),
        (
            (max, max),
            (0, max),
            [
                "1.015ms request (rr 128 id 128): access 0xe rtr Some(128) rts Some(128)",
                "1.015ms accepted: access 0x2 rtr Some(0) rts Some(128)",
            ],
            "1.02ms response (rr 128 id 0): access 0xe rtr Some(128) rts Some(0)",
        ),
        (
            (4, 2),
            (max, max),
            [
                "1.015ms request (rr 2 id 4): access 0xe rtr Some(2) rts Some(4)",
                "1.015ms accepted: access 0xe rtr Some(2) rts Some(4)",
            ],
            "1.02ms response (rr 4 id 2): access 0xe rtr Some(4) rts Some(2)",
        ),
        (
            (1, 6),
            (7, 2),
            [
                "1.015ms request (rr 6 id 1): access 0xe rtr Some(6) rts Some(1)",
                "1.015ms accepted: access 0xe rtr Some(7) rts Some(2)",
            ],
            "1.02ms response (rr 2 id 7): access 0xe rtr Some(2) rts Some(7)",
        ),
    ];
    for (seed, (client, server, want_server, want_client)) in (20..).zip(cases) {
        let (s, c) = qp_attrs_seen(seed, client, server);
        assert_eq!(s, want_server, "{client:?} {server:?}");
        assert_eq!(
            c.last().map(String::as_str),
            Some(want_client),
            "{client:?} {server:?}"
        );
    }
}
