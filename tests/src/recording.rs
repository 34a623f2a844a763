//! Normalized traces of scenarios, recorded the same way on every backend, so that a scenario's
//! run on the simulator and on real librdmacm can be compared line by line ([`crate::fidelity`]).
//!
//! [`RecordingBed`] wraps any [`TestBed`]: its two backends are [`Recorded`] wrappers that
//! forward every call to the bed's own backends and write one line per call to a shared
//! [`Recorder`]: the side (`S` server, `C` client), the call with its arguments, and its
//! result (`ok`, the errno's name, or the event fetched with its kind, status, defined
//! parameters and private-data length). Fault hooks are recorded too (`hook remove_device`).
//!
//! Nothing backend-specific reaches a line: ids, channels, QP numbers and ports are named in
//! the order they first appear (`id1`, `ch1`, `qp1`, `p1`), the bed's addresses by their role
//! (`host`, `silent`, ...), times only as the interval since the previous line when it is long
//! enough to come from a timer ([`TIMER_INTERVAL`]); consecutive identical lines (a polling
//! loop) are kept once.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cmtwin::{
    AddrInfo, AddrInfoHints, AsyncEvent, ChannelHandle, CmBackend, CmEvent, CmOption, ConnParam,
    EventInfo, EventKind, EventParam, IdHandle, JoinFlags, PortSpace, QpInitAttr, Result,
    Transport, Wait,
};

use crate::bed::{CmTimer, HookResult};
use crate::capability::Need;
use crate::TestBed;

/// The shortest interval between two lines that a trace shows: shorter ones are the work of
/// the machine (and vary from run to run on a real one), longer ones come from the CM's timers
/// or the scenario's own waits.
pub const TIMER_INTERVAL: Duration = Duration::from_millis(100);

/// One recorded line: when it was written (on the bed's server clock), what it says, and
/// for a fault hook when it started: a hook's own duration (a real bed runs `rdma link`) is
/// the machine's work, so the interval shown before it ends at its start and the next one
/// starts from its end.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    at: Duration,
    started: Option<Duration>,
    text: String,
}

/// The roles of the bed's addresses, for naming them in lines.
#[derive(Clone, Debug, Default)]
struct AddressRoles {
    roles: Vec<(IpAddr, &'static str)>,
}

impl AddressRoles {
    fn of_bed<T: TestBed>(bed: &T) -> Self {
        let mut roles = vec![(bed.server_ip(), "host"), (bed.client_ip(), "host")];
        let optional = [
            (bed.silent_ip(), "silent"),
            (bed.no_neighbour_ip(), "noarp"),
            (bed.unroutable_ip(), "unroutable"),
        ];
        roles.extend(optional.into_iter().filter_map(|(ip, r)| Some((ip?, r))));
        AddressRoles { roles }
    }

    fn name(&self, ip: IpAddr) -> String {
        if let Some((_, role)) = self.roles.iter().find(|(a, _)| *a == ip) {
            return (*role).to_string();
        }
        if ip.is_unspecified() {
            return if ip.is_ipv4() { "any4" } else { "any6" }.to_string();
        }
        if ip.is_loopback() {
            return if ip.is_ipv4() { "lo4" } else { "lo6" }.to_string();
        }
        // Other constants of the scenarios are the same on every bed.
        ip.to_string()
    }
}

/// Names in order of first appearance, for values whose numbers differ between backends.
#[derive(Debug, Default)]
struct Names {
    ids: BTreeMap<(char, IdHandle), usize>,
    channels: BTreeMap<(char, ChannelHandle), usize>,
    qps: BTreeMap<u32, usize>,
    ports: BTreeMap<u16, usize>,
    groups: BTreeMap<IpAddr, usize>,
}

fn name_of<K: Ord>(map: &mut BTreeMap<K, usize>, key: K) -> usize {
    let next = map.len() + 1;
    *map.entry(key).or_insert(next)
}

/// The trace of one scenario on one bed, shared by the bed's two [`Recorded`] backends.
#[derive(Debug, Default)]
pub struct Recorder {
    state: Mutex<RecorderState>,
}

#[derive(Debug, Default)]
struct RecorderState {
    lines: Vec<Line>,
    names: Names,
    addresses: AddressRoles,
}

impl Recorder {
    fn state(&self) -> MutexGuard<'_, RecorderState> {
        // A scenario that panicked mid-line leaves nothing half-written worth refusing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, at: Duration, text: String) {
        self.state().lines.push(Line {
            at,
            started: None,
            text,
        });
    }

    /// The name `ip` has in lines (a group's name by appearance, an address's role).
    fn ip_name(&self, ip: IpAddr) -> String {
        Namer {
            state: self.state(),
            side: ' ',
        }
        .ip(ip)
    }

    /// The normalized trace so far: one line per call or hook, consecutive identical lines
    /// kept once, each line followed by `  +<seconds>s` when at least [`TIMER_INTERVAL`]
    /// passed since the previous line kept.
    pub fn text(&self) -> String {
        let state = self.state();
        let mut out = String::new();
        let mut previous: Option<&Line> = None;
        for line in &state.lines {
            if previous.is_some_and(|p| p.text == line.text) {
                continue;
            }
            let end = line.started.unwrap_or(line.at);
            let since = previous.map_or(Duration::ZERO, |p| end.saturating_sub(p.at));
            out.push_str(&line.text);
            if since >= TIMER_INTERVAL {
                let _ = write!(out, "  +{:.3}s", since.as_secs_f64());
            }
            out.push('\n');
            previous = Some(line);
        }
        out
    }
}

/// How a [`Recorded`] backend writes values into its lines.
struct Namer<'a> {
    state: MutexGuard<'a, RecorderState>,
    side: char,
}

impl Namer<'_> {
    fn id(&mut self, id: IdHandle) -> String {
        format!("id{}", name_of(&mut self.state.names.ids, (self.side, id)))
    }
    fn listener(&mut self, id: Option<IdHandle>) -> String {
        id.map_or_else(|| "-".to_string(), |id| self.id(id))
    }
    fn channel(&mut self, ch: ChannelHandle) -> String {
        format!(
            "ch{}",
            name_of(&mut self.state.names.channels, (self.side, ch))
        )
    }
    fn channels(&mut self, chs: &[ChannelHandle]) -> String {
        let names: Vec<String> = chs.iter().map(|&c| self.channel(c)).collect();
        format!("[{}]", names.join(","))
    }
    fn qp(&mut self, qpn: u32) -> String {
        match qpn {
            0 => "qp0".to_string(),
            0xFF_FFFF => "qp-multicast".to_string(),
            n => format!("qp{}", name_of(&mut self.state.names.qps, n)),
        }
    }
    fn port(&mut self, port: u16) -> String {
        if port == 0 {
            return "0".to_string();
        }
        format!("p{}", name_of(&mut self.state.names.ports, port))
    }
    fn ip(&mut self, ip: IpAddr) -> String {
        if ip.is_multicast() {
            // Scenarios take a fresh group per run (unique within a process).
            return format!("group{}", name_of(&mut self.state.names.groups, ip));
        }
        self.state.addresses.name(ip)
    }
    fn addr(&mut self, addr: SocketAddr) -> String {
        let ip = self.ip(addr.ip());
        format!("{ip}:{}", self.port(addr.port()))
    }
    fn opt_addr(&mut self, addr: Option<SocketAddr>) -> String {
        addr.map_or_else(|| "-".to_string(), |a| self.addr(a))
    }
    fn node(&mut self, node: Option<&str>) -> String {
        match node {
            None => "-".to_string(),
            Some(text) => match text.parse::<IpAddr>() {
                Ok(ip) => self.ip(ip),
                Err(_) => format!("{text:?}"),
            },
        }
    }
    fn conn_param(&mut self, param: Option<&ConnParam>) -> String {
        let Some(p) = param else {
            return "-".to_string();
        };
        format!(
            "{{pd={} rr={} id={} fc={} retry={} rnr={} srq={} qp={}}}",
            p.private_data.len(),
            p.responder_resources,
            p.initiator_depth,
            p.flow_control,
            p.retry_count,
            p.rnr_retry_count,
            p.srq,
            self.qp(p.qp_num)
        )
    }
    fn event_info(&mut self, info: &EventInfo, pd: Option<&[u8]>) -> String {
        let id = self.id(info.id);
        let listen = self.listener(info.listen_id);
        let param = self.param(&info.param);
        let pd = pd.map_or_else(|| "none".to_string(), |d| d.len().to_string());
        format!(
            "{} status={} id={id} listen={listen} ps={:?} {param} pd={pd}",
            event_name(info.kind),
            info.status,
            info.port_space
        )
    }
    fn param(&mut self, param: &EventParam) -> String {
        match param {
            EventParam::Conn(c) => format!(
                "conn{{rr={} id={} fc={} retry={} rnr={} srq={} qp={}}}",
                c.responder_resources,
                c.initiator_depth,
                c.flow_control,
                c.retry_count,
                c.rnr_retry_count,
                c.srq,
                self.qp(c.qp_num)
            ),
            EventParam::Ud(ud) => format!("ud{{qp={} qkey={:#x}}}", self.qp(ud.qp_num), ud.qkey),
            EventParam::Multicast { ud, context } => format!(
                "mcast{{qp={} qkey={:#x} context={context}}}",
                self.qp(ud.qp_num),
                ud.qkey
            ),
            EventParam::User(arg) => format!("user{{{arg}}}"),
            _ => "-".to_string(),
        }
    }
    fn addrinfo(&mut self, infos: &[AddrInfo]) -> String {
        let each: Vec<String> = infos
            .iter()
            .map(|i| {
                let (src, dst) = (self.opt_addr(i.src_addr), self.opt_addr(i.dst_addr));
                format!(
                    "{{flags={:#x} ps={:?} qp={:?} src={src} dst={dst}}}",
                    i.flags, i.port_space, i.qp_type
                )
            })
            .collect();
        format!("[{}]", each.join(","))
    }
}

/// The short name of an event kind (`CONNECT_REQUEST`), its number if librdmacm has no name.
fn event_name(kind: EventKind) -> String {
    match kind {
        EventKind::Unknown(n) => format!("UNKNOWN_{n}"),
        k => k.name().trim_start_matches("RDMA_CM_EVENT_").to_string(),
    }
}

fn wait_text(wait: Wait) -> String {
    match wait {
        Wait::Block => "block".to_string(),
        Wait::NonBlocking => "nonblocking".to_string(),
        Wait::Timeout(d) => format!("{}ms", d.as_millis()),
    }
}

/// A result without a value as a line's tail.
fn unit_text(result: &Result<()>) -> String {
    match result {
        Ok(()) => "ok".to_string(),
        Err(e) => errno_text(e),
    }
}

fn errno_text(e: &cmtwin::CmError) -> String {
    e.errno
        .name()
        .map_or_else(|| format!("errno {}", e.errno.0), str::to_string)
}

/// A backend that forwards every call to `inner` and records it in its [`Recorder`].
pub struct Recorded<B> {
    inner: B,
    side: char,
    recorder: Arc<Recorder>,
    /// The clock of every line: the server's backend, so that both sides share it.
    clock: B,
}

impl<B: CmBackend> Recorded<B> {
    /// The recorded line `call = result`, with values named by `describe`.
    fn record(&self, describe: impl FnOnce(&mut Namer<'_>) -> String) {
        let at = self.clock.now();
        let text = {
            let mut namer = Namer {
                state: self.recorder.state(),
                side: self.side,
            };
            format!("{} {}", self.side, describe(&mut namer))
        };
        self.recorder.push(at, text);
    }

    /// Records `call(id) = address` for the address queries.
    fn record_addr(&self, call: &str, id: IdHandle, result: &Result<Option<SocketAddr>>) {
        self.record(|n| {
            let id = n.id(id);
            let result = match result {
                Ok(a) => n.opt_addr(*a),
                Err(e) => errno_text(e),
            };
            format!("{call}({id}) = {result}")
        });
    }

    fn event_text(n: &mut Namer<'_>, result: &Result<CmEvent>) -> String {
        match result {
            Ok(ev) => n.event_info(ev.info(), ev.private_data_opt()),
            Err(e) => errno_text(e),
        }
    }
}

impl<B: CmBackend> CmBackend for Recorded<B> {
    fn create_event_channel(&self) -> Result<ChannelHandle> {
        let r = self.inner.create_event_channel();
        self.record(|n| match &r {
            Ok(ch) => format!("create_event_channel() = {}", n.channel(*ch)),
            Err(e) => format!("create_event_channel() = {}", errno_text(e)),
        });
        r
    }
    fn destroy_event_channel(&self, channel: ChannelHandle) -> Result<()> {
        let r = self.inner.destroy_event_channel(channel);
        self.record(|n| {
            format!(
                "destroy_event_channel({}) = {}",
                n.channel(channel),
                unit_text(&r)
            )
        });
        r
    }
    fn create_id(
        &self,
        channel: Option<ChannelHandle>,
        context: u64,
        port_space: PortSpace,
    ) -> Result<IdHandle> {
        let r = self.inner.create_id(channel, context, port_space);
        self.record(|n| {
            let ch = channel.map_or_else(|| "sync".to_string(), |c| n.channel(c));
            let result = match &r {
                Ok(id) => n.id(*id),
                Err(e) => errno_text(e),
            };
            format!("create_id({ch}, {context}, {port_space:?}) = {result}")
        });
        r
    }
    fn destroy_id(&self, id: IdHandle) -> Result<()> {
        let r = self.inner.destroy_id(id);
        self.record(|n| format!("destroy_id({}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn bind_addr(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        let r = self.inner.bind_addr(id, addr);
        self.record(|n| {
            format!(
                "bind_addr({}, {}) = {}",
                n.id(id),
                n.addr(addr),
                unit_text(&r)
            )
        });
        r
    }
    fn resolve_addr(
        &self,
        id: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let r = self.inner.resolve_addr(id, src, dst, timeout);
        self.record(|n| {
            let (id, src, dst) = (n.id(id), n.opt_addr(src), n.addr(dst));
            let ms = timeout.as_millis();
            format!(
                "resolve_addr({id}, {src}, {dst}, {ms}ms) = {}",
                unit_text(&r)
            )
        });
        r
    }
    fn resolve_route(&self, id: IdHandle, timeout: Duration) -> Result<()> {
        let r = self.inner.resolve_route(id, timeout);
        self.record(|n| {
            let ms = timeout.as_millis();
            format!("resolve_route({}, {ms}ms) = {}", n.id(id), unit_text(&r))
        });
        r
    }
    fn listen(&self, id: IdHandle, backlog: i32) -> Result<()> {
        let r = self.inner.listen(id, backlog);
        self.record(|n| format!("listen({}, {backlog}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn get_request(&self, listen: IdHandle) -> Result<IdHandle> {
        let r = self.inner.get_request(listen);
        self.record(|n| {
            let l = n.id(listen);
            let result = match &r {
                Ok(id) => n.id(*id),
                Err(e) => errno_text(e),
            };
            format!("get_request({l}) = {result}")
        });
        r
    }
    fn create_ep(&self, info: &AddrInfo, qp_init: Option<&mut QpInitAttr>) -> Result<IdHandle> {
        let asked = qp_init.as_deref().map(|a| a.cap);
        let r = self.inner.create_ep(info, qp_init);
        self.record(|n| {
            let (src, dst) = (n.opt_addr(info.src_addr), n.opt_addr(info.dst_addr));
            let (flags, ps, qpt) = (info.flags, info.port_space, info.qp_type);
            let qp = asked.map_or_else(|| "no QP".to_string(), |cap| format!("{cap:?}"));
            let result = match &r {
                Ok(id) => n.id(*id),
                Err(e) => errno_text(e),
            };
            format!("create_ep({flags:#x}, {ps:?}, {qpt:?}, {src}, {dst}, {qp}) = {result}")
        });
        r
    }
    fn destroy_ep(&self, id: IdHandle) -> Result<()> {
        let r = self.inner.destroy_ep(id);
        self.record(|n| format!("destroy_ep({}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn connect(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        let r = self.inner.connect(id, param);
        self.record(|n| {
            let (id, p) = (n.id(id), n.conn_param(param));
            format!("connect({id}, {p}) = {}", unit_text(&r))
        });
        r
    }
    fn accept(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        let r = self.inner.accept(id, param);
        self.record(|n| {
            let (id, p) = (n.id(id), n.conn_param(param));
            format!("accept({id}, {p}) = {}", unit_text(&r))
        });
        r
    }
    fn reject(&self, id: IdHandle, private_data: &[u8]) -> Result<()> {
        let r = self.inner.reject(id, private_data);
        self.record(|n| {
            let len = private_data.len();
            format!("reject({}, pd={len}) = {}", n.id(id), unit_text(&r))
        });
        r
    }
    fn disconnect(&self, id: IdHandle) -> Result<()> {
        let r = self.inner.disconnect(id);
        self.record(|n| format!("disconnect({}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn notify(&self, id: IdHandle, event: AsyncEvent) -> Result<()> {
        let r = self.inner.notify(id, event);
        self.record(|n| format!("notify({}, {event:?}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn establish(&self, id: IdHandle) -> Result<()> {
        let r = self.inner.establish(id);
        self.record(|n| format!("establish({}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn write_cm_event(&self, id: IdHandle, kind: EventKind, status: i32, arg: u64) -> Result<()> {
        let r = self.inner.write_cm_event(id, kind, status, arg);
        self.record(|n| {
            let (id, kind) = (n.id(id), event_name(kind));
            format!(
                "write_cm_event({id}, {kind}, {status}, {arg}) = {}",
                unit_text(&r)
            )
        });
        r
    }
    fn get_cm_event(&self, channel: ChannelHandle, wait: Wait) -> Result<CmEvent> {
        let r = self.inner.get_cm_event(channel, wait);
        self.record(|n| {
            let ch = n.channel(channel);
            format!(
                "get_cm_event({ch}, {}) = {}",
                wait_text(wait),
                Self::event_text(n, &r)
            )
        });
        r
    }
    fn ack_cm_event(&self, event: CmEvent) -> Result<()> {
        let kind = event_name(event.kind());
        let id = event.id();
        let r = self.inner.ack_cm_event(event);
        self.record(|n| format!("ack_cm_event({kind} of {}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn get_cm_event_any(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
    ) -> Result<(ChannelHandle, CmEvent)> {
        let r = self.inner.get_cm_event_any(channels, wait);
        self.record(|n| {
            let chs = n.channels(channels);
            let result = match &r {
                Ok((ch, ev)) => {
                    let ch = n.channel(*ch);
                    format!("{ch}: {}", n.event_info(ev.info(), ev.private_data_opt()))
                }
                Err(e) => errno_text(e),
            };
            format!("get_cm_event_any({chs}, {}) = {result}", wait_text(wait))
        });
        r
    }
    fn try_get_cm_event(
        &self,
        channels: &[ChannelHandle],
    ) -> Result<Option<(ChannelHandle, CmEvent)>> {
        let r = self.inner.try_get_cm_event(channels);
        self.record(|n| {
            let chs = n.channels(channels);
            let result = match &r {
                Ok(Some((ch, ev))) => {
                    let ch = n.channel(*ch);
                    format!("{ch}: {}", n.event_info(ev.info(), ev.private_data_opt()))
                }
                Ok(None) => "none".to_string(),
                Err(e) => errno_text(e),
            };
            format!("try_get_cm_event({chs}) = {result}")
        });
        r
    }
    fn poll_channels(&self, channels: &[ChannelHandle], wait: Wait) -> Result<Vec<ChannelHandle>> {
        let r = self.inner.poll_channels(channels, wait);
        self.record(|n| {
            let chs = n.channels(channels);
            let result = match &r {
                Ok(ready) => n.channels(ready),
                Err(e) => errno_text(e),
            };
            format!("poll_channels({chs}, {}) = {result}", wait_text(wait))
        });
        r
    }
    fn join_multicast(&self, id: IdHandle, addr: SocketAddr, context: u64) -> Result<()> {
        let r = self.inner.join_multicast(id, addr, context);
        self.record(|n| {
            let (id, a) = (n.id(id), n.addr(addr));
            format!("join_multicast({id}, {a}, {context}) = {}", unit_text(&r))
        });
        r
    }
    fn join_multicast_ex(
        &self,
        id: IdHandle,
        addr: SocketAddr,
        flags: JoinFlags,
        context: u64,
    ) -> Result<()> {
        let r = self.inner.join_multicast_ex(id, addr, flags, context);
        self.record(|n| {
            let (id, a) = (n.id(id), n.addr(addr));
            format!(
                "join_multicast_ex({id}, {a}, {flags:?}, {context}) = {}",
                unit_text(&r)
            )
        });
        r
    }
    fn leave_multicast(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        let r = self.inner.leave_multicast(id, addr);
        self.record(|n| {
            let (id, a) = (n.id(id), n.addr(addr));
            format!("leave_multicast({id}, {a}) = {}", unit_text(&r))
        });
        r
    }
    fn resolve_addrinfo(
        &self,
        id: IdHandle,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<()> {
        let r = self.inner.resolve_addrinfo(id, node, service, hints);
        self.record(|n| {
            let (id, node) = (n.id(id), n.node(node));
            format!(
                "resolve_addrinfo({id}, {node}, {service:?}, {hints:?}) = {}",
                unit_text(&r)
            )
        });
        r
    }
    fn query_addrinfo(&self, id: IdHandle) -> Result<Vec<AddrInfo>> {
        let r = self.inner.query_addrinfo(id);
        self.record(|n| {
            let id = n.id(id);
            let result = match &r {
                Ok(infos) => n.addrinfo(infos),
                Err(e) => errno_text(e),
            };
            format!("query_addrinfo({id}) = {result}")
        });
        r
    }
    fn getaddrinfo(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<Vec<AddrInfo>> {
        let r = self.inner.getaddrinfo(node, service, hints);
        self.record(|n| {
            let node = n.node(node);
            let result = match &r {
                Ok(infos) => n.addrinfo(infos),
                Err(e) => errno_text(e),
            };
            format!("getaddrinfo({node}, {service:?}, {hints:?}) = {result}")
        });
        r
    }
    fn migrate_id(&self, id: IdHandle, channel: Option<ChannelHandle>) -> Result<()> {
        let r = self.inner.migrate_id(id, channel);
        self.record(|n| {
            let id = n.id(id);
            let ch = channel.map_or_else(|| "sync".to_string(), |c| n.channel(c));
            format!("migrate_id({id}, {ch}) = {}", unit_text(&r))
        });
        r
    }
    fn set_option(&self, id: IdHandle, option: &CmOption) -> Result<()> {
        let r = self.inner.set_option(id, option);
        self.record(|n| format!("set_option({}, {option:?}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn create_qp(&self, id: IdHandle, attr: &QpInitAttr) -> Result<u32> {
        let r = self.inner.create_qp(id, attr);
        self.record(|n| {
            let id = n.id(id);
            let result = match &r {
                Ok(qpn) => n.qp(*qpn),
                Err(e) => errno_text(e),
            };
            format!("create_qp({id}, {:?}) = {result}", attr.qp_type)
        });
        r
    }
    fn destroy_qp(&self, id: IdHandle) -> Result<()> {
        let r = self.inner.destroy_qp(id);
        self.record(|n| format!("destroy_qp({}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn sync_event(&self, id: IdHandle) -> Result<Option<EventInfo>> {
        let r = self.inner.sync_event(id);
        self.record(|n| {
            let id = n.id(id);
            let result = match &r {
                Ok(Some(info)) => n.event_info(info, info.private_data_opt()),
                Ok(None) => "none".to_string(),
                Err(e) => errno_text(e),
            };
            format!("sync_event({id}) = {result}")
        });
        r
    }
    fn local_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        let r = self.inner.local_addr(id);
        self.record_addr("local_addr", id, &r);
        r
    }
    fn peer_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        let r = self.inner.peer_addr(id);
        self.record_addr("peer_addr", id, &r);
        r
    }
    fn context(&self, id: IdHandle) -> Result<u64> {
        let r = self.inner.context(id);
        self.record(|n| {
            let id = n.id(id);
            let result = match &r {
                Ok(c) => c.to_string(),
                Err(e) => errno_text(e),
            };
            format!("context({id}) = {result}")
        });
        r
    }
    fn set_context(&self, id: IdHandle, context: u64) -> Result<()> {
        let r = self.inner.set_context(id, context);
        self.record(|n| format!("set_context({}, {context}) = {}", n.id(id), unit_text(&r)));
        r
    }
    fn qp_num(&self, id: IdHandle) -> Result<Option<u32>> {
        let r = self.inner.qp_num(id);
        self.record(|n| {
            let id = n.id(id);
            let result = match &r {
                Ok(Some(qpn)) => n.qp(*qpn),
                Ok(None) => "none".to_string(),
                Err(e) => errno_text(e),
            };
            format!("qp_num({id}) = {result}")
        });
        r
    }
    /// Not recorded: the device's name and GUID differ between a bed and its twin.
    fn devices(&self) -> Result<Vec<cmtwin::DeviceInfo>> {
        self.inner.devices()
    }
    /// Recorded as whether the id has a device, and its port: its name and GUID differ
    /// between a bed and its twin.
    fn id_device(&self, id: IdHandle) -> Result<Option<cmtwin::IdDevice>> {
        let r = self.inner.id_device(id);
        self.record(|n| {
            let id = n.id(id);
            let result = match &r {
                Ok(Some(d)) => format!("port {}", d.port_num),
                Ok(None) => "none".to_string(),
                Err(e) => errno_text(e),
            };
            format!("id_device({id}) = {result}")
        });
        r
    }
    fn now(&self) -> Duration {
        self.inner.now()
    }
    fn sleep(&self, duration: Duration) -> Result<()> {
        let r = self.inner.sleep(duration);
        self.record(|_| format!("sleep({}ms) = {}", duration.as_millis(), unit_text(&r)));
        r
    }
    /// Not recorded: how often an executor spins is a matter of scheduling, not of the CM.
    fn spin(&self, until: Option<Duration>) -> Result<()> {
        self.inner.spin(until)
    }
}

/// A [`TestBed`] whose backends record every call into one [`Recorder`]; everything else is
/// the wrapped bed's.
pub struct RecordingBed<T: TestBed> {
    inner: T,
    server: Recorded<T::Backend>,
    client: Recorded<T::Backend>,
    recorder: Arc<Recorder>,
}

impl<T: TestBed> RecordingBed<T>
where
    T::Backend: Clone,
{
    /// Wraps `bed`; its trace starts empty.
    pub fn new(bed: T) -> Self {
        let recorder = Arc::new(Recorder::default());
        recorder.state().addresses = AddressRoles::of_bed(&bed);
        let wrap = |backend: &T::Backend, side| Recorded {
            inner: backend.clone(),
            side,
            recorder: Arc::clone(&recorder),
            clock: bed.server().clone(),
        };
        let (server, client) = (wrap(bed.server(), 'S'), wrap(bed.client(), 'C'));
        RecordingBed {
            inner: bed,
            server,
            client,
            recorder,
        }
    }
}

impl<T: TestBed> RecordingBed<T> {
    /// The trace recorded so far.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The wrapped bed.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Runs the fault hook `name` and records it.
    fn hook(&self, name: &str, run: impl FnOnce(&T) -> HookResult) -> HookResult {
        let started = self.server.clock.now();
        let result = run(&self.inner);
        let outcome = if result.is_ok() { "ok" } else { "failed" };
        self.recorder.state().lines.push(Line {
            at: self.server.clock.now(),
            started: Some(started),
            text: format!("hook {name} = {outcome}"),
        });
        result
    }
}

impl<T: TestBed> TestBed for RecordingBed<T> {
    type Backend = Recorded<T::Backend>;
    fn server(&self) -> &Self::Backend {
        &self.server
    }
    fn client(&self) -> &Self::Backend {
        &self.client
    }
    fn server_ip(&self) -> IpAddr {
        self.inner.server_ip()
    }
    fn client_ip(&self) -> IpAddr {
        self.inner.client_ip()
    }
    fn transport(&self) -> Transport {
        self.inner.transport()
    }
    fn fresh_port(&self) -> u16 {
        self.inner.fresh_port()
    }
    fn is_simulated(&self) -> bool {
        self.inner.is_simulated()
    }
    fn has_write_cm_event(&self) -> bool {
        self.inner.has_write_cm_event()
    }
    fn unconfigured_address_errno(&self) -> Option<cmtwin::Errno> {
        self.inner.unconfigured_address_errno()
    }
    fn unroutable_ip(&self) -> Option<IpAddr> {
        self.inner.unroutable_ip()
    }
    fn now(&self) -> Duration {
        self.inner.now()
    }
    fn cm_timer_end(&self, timer: CmTimer, started: Duration) -> Option<Duration> {
        self.inner.cm_timer_end(timer, started)
    }
    fn twin_timer(&self, timer: CmTimer) -> Option<Duration> {
        self.inner.twin_timer(timer)
    }
    fn lacks(&self, need: Need) -> Option<String> {
        self.inner.lacks(need)
    }
    fn sides_share_a_device(&self) -> bool {
        self.inner.sides_share_a_device()
    }
    fn silent_ip(&self) -> Option<IpAddr> {
        self.inner.silent_ip()
    }
    fn no_neighbour_ip(&self) -> Option<IpAddr> {
        self.inner.no_neighbour_ip()
    }
    fn remove_device(&self) -> HookResult {
        self.hook("remove_device", T::remove_device)
    }
    fn restore_device(&self) -> HookResult {
        self.hook("restore_device", T::restore_device)
    }
    fn change_address(&self) -> HookResult {
        self.hook("change_address", T::change_address)
    }
    fn fail_path_queries(&self, no_path: bool) -> HookResult {
        let name = if no_path {
            "fail_path_queries(no path)"
        } else {
            "fail_path_queries(silent)"
        };
        self.hook(name, |bed| bed.fail_path_queries(no_path))
    }
    fn lose_multicast_group(&self, group: IpAddr) -> HookResult {
        let name = format!("lose_multicast_group({})", self.recorder.ip_name(group));
        self.hook(&name, |bed| bed.lose_multicast_group(group))
    }
}
