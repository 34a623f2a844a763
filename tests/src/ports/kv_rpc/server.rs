//! The key-value server: listens on one address, accepts any number of connections, answers
//! each request once per request id and client (a request sent again is answered from the
//! client's reply cache), and listens again when its device comes back after a removal. It
//! ends once the answer to a client's BYE is delivered (its send completed successfully), or,
//! when that cannot be known (the connection ended first: the client may have the answer, or
//! may come back for it), once it has been idle for [`ServerOptions::linger`] (a connection
//! still open then is one its client left without a word), as TCP's TIME_WAIT outlasts a
//! lost last acknowledgement.
//!
//! One thread does everything: every id is on one CM event channel, every connection's CQ
//! reports to one completion channel, waited for as [`super::wait`] says.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, MemoryRegion, QpInitAttrEx, WcOpcode, WcStatus};
use cmtwin::verbs::{SendFlags, WorkCompletion};
use cmtwin::{
    ChannelHandle, CmError, CmOption, CompChannelHandle, CqHandle, EventKind, IdHandle, PortSpace,
    QpCap, Result,
};

use super::messages::{apply, Message, Op, MSG_LEN};
use super::wait::{poll_all, queued_cq_event, Slices};
use super::{connect_param, ACK_TIMEOUT, RECV_DEPTH, SEND_DEPTH};
use crate::ports::session::Verbs;

/// How long the server waits for things that may not come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerOptions {
    /// The longest time without any CM event or completion before the server gives up.
    pub idle_limit: Duration,
    /// How long the server tries to listen (again) while its address has no device.
    pub listen_patience: Duration,
    /// The pause between two attempts to listen.
    pub listen_pause: Duration,
    /// How long the server stays idle after executing a BYE whose answer it does not know to
    /// be delivered (longer than a client takes to come back, and than its wait for an
    /// answer).
    pub linger: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            idle_limit: Duration::from_secs(60),
            listen_patience: Duration::from_secs(60),
            listen_pause: Duration::from_millis(50),
            linger: Duration::from_secs(10),
        }
    }
}

/// What the server did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerReport {
    /// The store at the end.
    pub store: BTreeMap<u64, u64>,
    /// How many times each (client, request id) was executed.
    pub executions: BTreeMap<(u64, u64), u32>,
    /// Requests answered from a reply cache (sent again by their client).
    pub replays: u32,
    /// Connections accepted.
    pub connections: u32,
    /// Connections closed, by why (an event's or a completion status's name).
    pub closes: BTreeMap<String, u32>,
    /// Times the server listened again after its listener's device was removed.
    pub relistens: u32,
}

/// A client's last executed request id and its reply.
type Cached = (u64, Message);

/// The server's state that outlives its listeners and connections.
#[derive(Default)]
struct Books {
    report: ServerReport,
    cache: BTreeMap<u64, Cached>,
    /// The answer to a BYE was delivered: the server ends.
    done: bool,
    /// A BYE was executed (its answer may or may not have been delivered).
    bye: bool,
}

impl Books {
    /// The reply to `req`: executed once per (client, request id), then from the cache.
    fn answer(&mut self, req: Message) -> Message {
        match self.cache.get(&req.client) {
            Some((last, reply)) if req.request == *last => {
                self.report.replays += 1;
                return *reply;
            }
            Some((last, _)) if req.request < *last => {
                return Message {
                    op: Op::Stale,
                    value: *last,
                    ..req
                }
            }
            _ => {}
        }
        *self
            .report
            .executions
            .entry((req.client, req.request))
            .or_default() += 1;
        self.bye |= req.op == Op::Bye;
        let value = apply(&mut self.report.store, req.op, req.key, req.value);
        let reply = Message { value, ..req };
        self.cache.insert(req.client, (req.request, reply));
        reply
    }

    fn closed(&mut self, why: String) {
        *self.report.closes.entry(why).or_default() += 1;
    }
}

/// The mark in the work request id of the reply to a BYE (its slot in the low bits).
const BYE_REPLY: u64 = 1 << 32;

/// What polling a connection's CQ found.
#[derive(Default)]
struct Polled {
    /// The client of the first request answered.
    client: Option<u64>,
    /// Why the connection is broken, if it is.
    broken: Option<String>,
}

/// One accepted connection.
struct Conn {
    id: IdHandle,
    verbs: Verbs,
    cq: CqHandle,
    rx: MemoryRegion,
    tx: MemoryRegion,
    /// The client that sent its first request.
    client: Option<u64>,
    /// Replies posted so far (the next one's slot is this modulo [`SEND_DEPTH`]).
    replies: u64,
}

impl Conn {
    /// Gives the requested `id` a QP whose CQ reports to `comp`, posts the receives, accepts.
    fn accept<B: DataPath>(cm: &B, id: IdHandle, comp: CompChannelHandle) -> Result<Conn> {
        let mut verbs = Verbs::new(cm, id, false)?;
        let built = Conn::build(cm, id, comp, &mut verbs);
        match built {
            Ok((cq, rx, tx)) => Ok(Conn {
                id,
                verbs,
                cq,
                rx,
                tx,
                client: None,
                replies: 0,
            }),
            Err(e) => {
                verbs.release(cm, id)?;
                Err(e)
            }
        }
    }

    fn build<B: DataPath>(
        cm: &B,
        id: IdHandle,
        comp: CompChannelHandle,
        verbs: &mut Verbs,
    ) -> Result<(CqHandle, MemoryRegion, MemoryRegion)> {
        cm.set_option(id, &CmOption::AckTimeout(ACK_TIMEOUT))?;
        let cq = cm.create_cq(id, RECV_DEPTH + SEND_DEPTH, Some(comp))?;
        verbs.cqs.push(cq);
        cm.req_notify_cq(cq, false)?;
        let mut attr = QpInitAttrEx::rc(verbs.pd, cq, cq);
        attr.cap = QpCap {
            max_send_wr: SEND_DEPTH,
            max_recv_wr: RECV_DEPTH,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        cm.create_qp_ex(id, &attr)?;
        let rx = verbs.region(cm, MSG_LEN * RECV_DEPTH as usize, AccessFlags::LOCAL_WRITE)?;
        let tx = verbs.region(cm, MSG_LEN * SEND_DEPTH as usize, AccessFlags::LOCAL_WRITE)?;
        for slot in 0..u64::from(RECV_DEPTH) {
            cm.post_recv_msg(id, slot, &rx, slot as usize * MSG_LEN, MSG_LEN as u32)?;
        }
        cm.accept(id, Some(&connect_param()))?;
        Ok((cq, rx, tx))
    }

    /// Handles one successful completion; returns the request answered, if it was one.
    fn on_completion<B: DataPath>(
        &mut self,
        cm: &B,
        wc: &WorkCompletion,
        books: &mut Books,
    ) -> Result<Option<Message>> {
        match wc.opcode {
            WcOpcode::Recv => {
                let offset = wc.wr_id as usize * MSG_LEN;
                let mut m = [0u8; MSG_LEN];
                cm.mr_read(self.rx.handle, offset, &mut m)?;
                let req = Message::decode(&m, wc.byte_len)?;
                cm.post_recv_msg(self.id, wc.wr_id, &self.rx, offset, MSG_LEN as u32)?;
                if self.client.is_some_and(|c| c != req.client) {
                    return Err(CmError::application(format!(
                        "client {} on the connection of client {:?}",
                        req.client, self.client
                    )));
                }
                self.client = Some(req.client);
                let reply = books.answer(req);
                let slot = self.replies % u64::from(SEND_DEPTH);
                self.replies += 1;
                let offset = slot as usize * MSG_LEN;
                cm.mr_write(self.tx.handle, offset, &reply.encode())?;
                let wr_id = slot | if reply.op == Op::Bye { BYE_REPLY } else { 0 };
                let flags = SendFlags::SIGNALED;
                cm.post_send_msg(self.id, wr_id, &self.tx, offset, MSG_LEN as u32, flags)?;
                Ok(Some(req))
            }
            _ => {
                books.done |= wc.wr_id & BYE_REPLY != 0;
                Ok(None)
            }
        }
    }

    /// Takes the completions of the CQ (after its CQ event), answering the requests, until
    /// it is empty or the connection is found broken (a failed completion, or a request it
    /// cannot answer).
    fn poll<B: DataPath>(&mut self, cm: &B, books: &mut Books) -> Result<Polled> {
        let mut wc = [WorkCompletion::default(); 8];
        let mut polled = Polled::default();
        let cq = self.cq;
        poll_all(cm, cq, &mut wc, |batch| {
            for wc in batch {
                if wc.status != WcStatus::SUCCESS {
                    polled.broken = Some(format!("completion {}", wc.status.as_str()));
                    return Ok(false);
                }
                match self.on_completion(cm, wc, books) {
                    Ok(Some(req)) => polled.client = polled.client.or(Some(req.client)),
                    Ok(None) => {}
                    Err(e) => {
                        polled.broken = Some(format!("request refused: {e}"));
                        return Ok(false);
                    }
                }
            }
            Ok(true)
        })?;
        Ok(polled)
    }

    /// Disconnects (when still connected) and releases everything.
    fn close<B: DataPath>(self, cm: &B) -> Result<()> {
        // EINVAL when the connection is already down, ENXIO once the device is gone: either
        // way there is nothing left to disconnect.
        let _ = cm.disconnect(self.id);
        let id = self.id;
        self.verbs.release(cm, id)?;
        cm.destroy_id(id)
    }
}

/// How a listener's life ended.
enum End {
    /// Its device was removed: listen again.
    DeviceRemoved,
    /// A BYE was answered: the server ends.
    Done,
}

/// A listener, the completion channel of its connections, and the connections.
struct Site {
    listener: IdHandle,
    comp: CompChannelHandle,
    conns: Vec<Conn>,
}

impl Site {
    /// Listens on `addr` with `channel`, trying again while the address has no device, for
    /// at most `opts.listen_patience`.
    fn open<B: DataPath>(
        cm: &B,
        channel: ChannelHandle,
        addr: SocketAddr,
        opts: &ServerOptions,
    ) -> Result<Site> {
        let start = cm.now();
        loop {
            let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
            let listening = cm
                .bind_addr(listener, addr)
                .and_then(|()| cm.listen(listener, 8))
                .and_then(|()| cm.create_comp_channel(listener));
            match listening {
                Ok(comp) => {
                    return Ok(Site {
                        listener,
                        comp,
                        conns: Vec::new(),
                    })
                }
                Err(e) => {
                    cm.destroy_id(listener)?;
                    if cm.now() - start >= opts.listen_patience {
                        return Err(CmError::application(format!(
                            "cannot listen on {addr} within {:?}: {e}",
                            opts.listen_patience
                        )));
                    }
                    cm.sleep(opts.listen_pause)?;
                }
            }
        }
    }

    /// Serves until the device goes away or a BYE is answered.
    fn serve<B: DataPath>(
        &mut self,
        cm: &B,
        channel: ChannelHandle,
        books: &mut Books,
        opts: &ServerOptions,
    ) -> Result<End> {
        let mut slices = Slices::default();
        let mut last_activity = cm.now();
        loop {
            while let Some((_, event)) = cm.try_get_cm_event(&[channel])? {
                last_activity = cm.now();
                slices.reset();
                let (kind, id) = (event.kind(), event.id());
                cm.ack_cm_event(event)?;
                if let Some(end) = self.on_event(cm, kind, id, books)? {
                    return Ok(end);
                }
            }
            let wait = if books.bye {
                opts.linger
            } else {
                opts.idle_limit
            };
            let until = last_activity + wait;
            if books.done || (books.bye && cm.now() >= until) {
                return Ok(End::Done);
            }
            if cm.now() >= until {
                return Err(CmError::application(format!(
                    "nothing happened for {:?} ({} connections open)",
                    opts.idle_limit,
                    self.conns.len()
                )));
            }
            let conns = &self.conns;
            let known = |cq| conns.iter().any(|c| c.cq == cq);
            if let Some(cq) = slices.wait_cq(cm, self.comp, until, known)? {
                last_activity = cm.now();
                self.on_cq(cm, cq, books)?;
            }
        }
    }

    /// Handles every CQ event already queued.
    fn take_queued<B: DataPath>(&mut self, cm: &B, books: &mut Books) -> Result<()> {
        loop {
            let conns = &self.conns;
            let known = |cq| conns.iter().any(|c| c.cq == cq);
            match queued_cq_event(cm, self.comp, known)? {
                Some(cq) => self.on_cq(cm, cq, books)?,
                None => return Ok(()),
            }
        }
    }

    /// Polls the connection of `cq` after its CQ event; closes it when broken, and the older
    /// connections of its client when it brought their client's request.
    fn on_cq<B: DataPath>(&mut self, cm: &B, cq: CqHandle, books: &mut Books) -> Result<()> {
        let Some(i) = self.conns.iter().position(|c| c.cq == cq) else {
            return Ok(());
        };
        let polled = self.conns[i].poll(cm, books)?;
        if let Some(why) = polled.broken {
            self.conns.remove(i).close(cm)?;
            books.closed(why);
            return Ok(());
        }
        if let Some(client) = polled.client {
            // The client is on this connection now: the ones it made before (accepted
            // earlier: the list is in accept order) are dead or dying. A late request on an
            // old connection closes nothing newer.
            let mut old = Vec::new();
            for (j, c) in std::mem::take(&mut self.conns).into_iter().enumerate() {
                match j < i && c.client == Some(client) {
                    true => old.push(c),
                    false => self.conns.push(c),
                }
            }
            for conn in old {
                conn.close(cm)?;
                books.closed("superseded".into());
            }
        }
        Ok(())
    }

    /// Handles a CM event of `id`.
    fn on_event<B: DataPath>(
        &mut self,
        cm: &B,
        kind: EventKind,
        id: IdHandle,
        books: &mut Books,
    ) -> Result<Option<End>> {
        if kind == EventKind::ConnectRequest {
            match Conn::accept(cm, id, self.comp) {
                Ok(conn) => {
                    books.report.connections += 1;
                    self.conns.push(conn);
                }
                Err(e) => {
                    books.closed(format!("not accepted: {} {}", e.call, e.errno));
                    cm.destroy_id(id)?;
                }
            }
            return Ok(None);
        }
        if matches!(kind, EventKind::Established | EventKind::TimewaitExit) {
            return Ok(None);
        }
        // Completions that came before the end are answered first (a delivered BYE answer
        // ends the server).
        self.take_queued(cm, books)?;
        if id == self.listener {
            return Ok((kind == EventKind::DeviceRemoval).then_some(End::DeviceRemoved));
        }
        if let Some(i) = self.conns.iter().position(|c| c.id == id) {
            self.conns.remove(i).close(cm)?;
            books.closed(format!("event {kind}"));
        }
        Ok(None)
    }

    /// Closes every connection, then the listener and the completion channel.
    fn close<B: DataPath>(self, cm: &B) -> Result<()> {
        for conn in self.conns {
            conn.close(cm)?;
        }
        cm.destroy_comp_channel(self.comp)?;
        cm.destroy_id(self.listener)
    }
}

/// Serves on `addr` until a BYE is answered; returns what it did.
pub fn serve<B: DataPath>(cm: &B, addr: SocketAddr, opts: &ServerOptions) -> Result<ServerReport> {
    let channel = cm.create_event_channel()?;
    let mut books = Books::default();
    loop {
        let mut site = Site::open(cm, channel, addr, opts)?;
        let end = site.serve(cm, channel, &mut books, opts);
        let closed = site.close(cm);
        let end = end?;
        closed?;
        match end {
            End::DeviceRemoved => books.report.relistens += 1,
            End::Done => break,
        }
    }
    cm.destroy_event_channel(channel)?;
    Ok(books.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(request: u64, op: Op, key: u64, value: u64) -> Message {
        Message {
            client: 9,
            request,
            op,
            key,
            value,
        }
    }

    #[test]
    fn a_request_sent_again_is_answered_from_the_cache_not_executed() {
        let mut books = Books::default();
        assert_eq!(books.answer(req(1, Op::Add, 4, 5)).value, 5);
        assert_eq!(books.answer(req(1, Op::Add, 4, 5)).value, 5);
        assert_eq!(books.answer(req(2, Op::Add, 4, 5)).value, 10);
        assert_eq!(books.report.executions.get(&(9, 1)), Some(&1));
        assert_eq!(books.report.executions.get(&(9, 2)), Some(&1));
        assert_eq!(books.report.replays, 1);
        assert_eq!(books.report.store.get(&4), Some(&10));
        // An older request than the last executed one is refused, not executed.
        let stale = books.answer(req(1, Op::Add, 4, 5));
        assert_eq!((stale.op, stale.value), (Op::Stale, 2));
        assert_eq!(books.report.store.get(&4), Some(&10));
        assert!(!books.bye);
        assert_eq!(books.answer(req(3, Op::Bye, 0, 0)).op, Op::Bye);
        assert!(books.bye && !books.done);
    }
}
