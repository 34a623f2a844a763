//! The operations the CM model drives, and the proptest strategy that draws sequences of them:
//! mostly well-formed connection lifecycles (create, resolve, route, QP, connect, accept or
//! reject, disconnect, destroy) with misuse calls and stale handles sprinkled in.

use proptest::prelude::*;

/// How many connection slots a case uses: each slot is one client channel, the latest client
/// id created on it, and the server's child id of that client's request.
pub const SLOTS: usize = 2;

/// The id an operation acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The latest client id of a slot.
    Client(usize),
    /// The server's child id of the slot's latest request.
    Child(usize),
    /// The server's latest listener.
    Listener,
    /// Any id ever created in the case, destroyed ones included (index modulo their number).
    Any(usize),
}

/// One step of a case. Every step the model can predict exactly is made and checked; a step
/// whose target does not exist, or whose outcome the model does not know exactly (see
/// `cm_model::predict`), is not made and counted apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A client channel for the slot (if it has none or it was destroyed) and a TCP id on it,
    /// or a UDP id (IB and RoCE only: iWARP has no UD, CM-SEMANTICS §13.2, and gets a TCP id).
    NewClient {
        /// The slot.
        slot: usize,
        /// A UDP id (else TCP).
        ud: bool,
    },
    /// A new TCP listener on the server's channel (a new one if it was destroyed), bound to
    /// the server's address with a fresh port, backlog 8, and on IB and RoCE a UDP one too;
    /// later resolutions aim at them (TCP ids at the TCP one, UDP ids at the UDP one).
    Relisten,
    /// `rdma_bind_addr` to the id's own host address with a fresh port.
    Bind(Target),
    /// `rdma_resolve_addr` towards the latest listener's address (2 s timeout).
    ResolveAddr(Target),
    /// `rdma_resolve_route` (2 s timeout).
    ResolveRoute(Target),
    /// `rdma_create_qp` (RC).
    CreateQp(Target),
    /// `rdma_connect`.
    Connect {
        /// The id.
        target: Target,
        /// Pass connection parameters (else none).
        param: bool,
        /// Private data length (with parameters).
        len: u8,
    },
    /// `rdma_listen` with backlog 8.
    Listen(Target),
    /// `rdma_accept` with parameters and `len` bytes of private data.
    Accept {
        /// The id.
        target: Target,
        /// Private data length.
        len: u8,
    },
    /// `rdma_reject` with `len` bytes of private data.
    Reject {
        /// The id.
        target: Target,
        /// Private data length.
        len: u8,
    },
    /// `rdma_disconnect`.
    Disconnect(Target),
    /// `rdma_notify(IB_EVENT_COMM_EST)`.
    Notify(Target),
    /// `rdma_establish`.
    Establish(Target),
    /// `rdma_connect`, `rdma_accept` or `rdma_reject` with one byte of private data more than
    /// the transport allows (CM-SEMANTICS §6.1).
    OverMax {
        /// The id.
        target: Target,
        /// Which call.
        call: OverMaxCall,
    },
    /// `rdma_create_id` on the slot's channel (live or destroyed): TCP, or an unknown port
    /// space. A TCP id made so belongs to no slot.
    StrayCreate {
        /// The slot.
        slot: usize,
        /// An unknown port space (else TCP).
        bad_ps: bool,
    },
    /// `rdma_destroy_id`.
    DestroyId(Target),
    /// `rdma_destroy_id` called on the other host's backend (a foreign handle).
    ForeignDestroy(Target),
    /// A non-blocking `rdma_get_cm_event` on a channel (the slot's, or the server's).
    Poll {
        /// The slot whose channel (else the server's).
        slot: Option<usize>,
    },
    /// `rdma_destroy_event_channel` (the slot's, or the server's).
    DestroyChannel {
        /// The slot whose channel (else the server's).
        slot: Option<usize>,
    },
}

/// The calls [`Op::OverMax`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverMaxCall {
    /// `rdma_connect`.
    Connect,
    /// `rdma_accept`.
    Accept,
    /// `rdma_reject`.
    Reject,
}

/// How the server answers a slot's request in a lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Accept,
    Reject,
    DestroyChild,
    DestroyClient,
    Nothing,
}

/// One lifecycle's choices (see [`lifecycle`]).
#[derive(Clone, Debug)]
struct Plan {
    slot: usize,
    ud: bool,
    bind: bool,
    param: bool,
    len: u8,
    answer: Answer,
    server_first: bool,
    second_disconnect: bool,
    destroy: Option<bool>,
    cut: Option<usize>,
    pokes: Vec<u8>,
    misuse: Vec<(usize, Op)>,
}

impl Plan {
    fn ops(&self) -> Vec<Op> {
        let (client, child) = (Target::Client(self.slot), Target::Child(self.slot));
        let mut ops = vec![Op::NewClient {
            slot: self.slot,
            ud: self.ud,
        }];
        if self.bind {
            ops.push(Op::Bind(client));
        }
        ops.extend([
            Op::ResolveAddr(client),
            Op::ResolveRoute(client),
            Op::CreateQp(client),
        ]);
        let (early, pokes): (Vec<u8>, Vec<u8>) = self.pokes.iter().partition(|k| **k % 12 == 8);
        let (pending, answered): (Vec<u8>, Vec<u8>) = pokes.iter().partition(|k| **k % 12 > 8);
        ops.extend(early.iter().map(|kind| poke(*kind, client, child)));
        ops.push(Op::Connect {
            target: client,
            param: self.param,
            len: self.len,
        });
        ops.extend(pending.iter().map(|kind| poke(*kind, client, child)));
        match self.answer {
            Answer::Accept => ops.extend([
                Op::CreateQp(child),
                Op::Accept {
                    target: child,
                    len: self.len,
                },
            ]),
            Answer::Reject => ops.push(Op::Reject {
                target: child,
                len: self.len,
            }),
            Answer::DestroyChild => ops.push(Op::DestroyId(child)),
            Answer::DestroyClient => ops.extend([
                Op::CreateQp(child),
                Op::DestroyId(client),
                Op::Accept {
                    target: child,
                    len: 0,
                },
            ]),
            Answer::Nothing => {}
        }
        ops.extend(answered.iter().map(|kind| poke(*kind, client, child)));
        let (first, second) = if self.server_first {
            (child, client)
        } else {
            (client, child)
        };
        // A UD exchange has no connection to end (§13.2).
        if !self.ud {
            ops.push(Op::Disconnect(first));
        }
        if self.second_disconnect && !self.ud {
            ops.push(Op::Disconnect(second));
        }
        match self.destroy {
            Some(true) => ops.extend([Op::DestroyId(client), Op::DestroyId(child)]),
            Some(false) => ops.extend([Op::DestroyId(child), Op::DestroyId(client)]),
            None => {}
        }
        if let Some(cut) = self.cut {
            ops.truncate(cut.max(1));
        }
        for (at, op) in self.misuse.iter().rev() {
            let at = (*at).min(ops.len());
            ops.insert(at, *op);
        }
        ops
    }
}

/// A call on a lifecycle's ids: before the connect, one with too much private data (kind 8);
/// while the request is pending (9 to 11), an accept or reject with too much private data or
/// an `rdma_establish` of the client; once the server answered (0 to 7, mostly on an
/// established pair), notify, establish, a second accept, connect or route resolution, a
/// reject or a bind.
fn poke(kind: u8, client: Target, child: Target) -> Op {
    let over = |target, call| Op::OverMax { target, call };
    match kind % 12 {
        8 => over(client, OverMaxCall::Connect),
        9 => over(child, OverMaxCall::Accept),
        10 => over(child, OverMaxCall::Reject),
        11 => Op::Establish(client),
        0 => Op::Notify(client),
        1 => Op::Notify(child),
        2 => Op::Establish(client),
        3 => Op::Accept {
            target: child,
            len: 0,
        },
        4 => Op::Connect {
            target: client,
            param: true,
            len: 0,
        },
        5 => Op::ResolveRoute(client),
        6 => Op::Reject {
            target: child,
            len: 0,
        },
        _ => Op::Bind(child),
    }
}

fn target() -> impl Strategy<Value = Target> {
    let slot = || 0..SLOTS;
    prop_oneof![
        3 => slot().prop_map(Target::Client),
        3 => slot().prop_map(Target::Child),
        1 => Just(Target::Listener),
        3 => (0usize..64).prop_map(Target::Any),
    ]
}

fn len() -> impl Strategy<Value = u8> {
    prop_oneof![Just(0u8), Just(16), Just(56)]
}

/// One misuse or stray call: any call on any id (stale and foreign ones included), polls,
/// channel destruction, new listeners.
fn misuse() -> impl Strategy<Value = Op> {
    let slot = || prop::option::weighted(0.7, 0..SLOTS);
    prop_oneof![
        2 => target().prop_map(Op::Bind),
        2 => target().prop_map(Op::ResolveAddr),
        2 => target().prop_map(Op::ResolveRoute),
        1 => target().prop_map(Op::CreateQp),
        3 => (target(), any::<bool>(), len())
            .prop_map(|(target, param, len)| Op::Connect { target, param, len }),
        2 => target().prop_map(Op::Listen),
        2 => (target(), len()).prop_map(|(target, len)| Op::Accept { target, len }),
        2 => (target(), len()).prop_map(|(target, len)| Op::Reject { target, len }),
        2 => target().prop_map(Op::Disconnect),
        2 => target().prop_map(Op::Notify),
        2 => target().prop_map(Op::Establish),
        1 => target().prop_map(Op::DestroyId),
        2 => target().prop_map(Op::ForeignDestroy),
        2 => slot().prop_map(|slot| Op::Poll { slot }),
        1 => slot().prop_map(|slot| Op::DestroyChannel { slot }),
        1 => Just(Op::Relisten),
        1 => (target(), prop_oneof![Just(OverMaxCall::Connect), Just(OverMaxCall::Accept), Just(OverMaxCall::Reject)])
            .prop_map(|(target, call)| Op::OverMax { target, call }),
        1 => (0..SLOTS, any::<bool>()).prop_map(|(slot, bad_ps)| Op::StrayCreate { slot, bad_ps }),
    ]
}

/// A lifecycle on one slot, mostly complete, of a UDP id 3 times in 20 (then without
/// disconnects): the answer is an accept 14 times in 20 (else a
/// reject, the child's or the client's destruction before an answer, or no answer), the second
/// disconnect comes 9 times in 10, one lifecycle in 10 is cut short, 0 to 3 calls poke its
/// ids at chosen points ([`poke`]), and 0 to 3 misuse calls are inserted anywhere.
fn lifecycle() -> impl Strategy<Value = Vec<Op>> {
    let answer = prop_oneof![
        14 => Just(Answer::Accept),
        3 => Just(Answer::Reject),
        1 => Just(Answer::DestroyChild),
        1 => Just(Answer::DestroyClient),
        1 => Just(Answer::Nothing),
    ];
    (
        (
            0..SLOTS,
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.8),
        ),
        (len(), answer, any::<bool>(), prop::bool::weighted(0.9)),
        prop::option::weighted(0.6, any::<bool>()),
        (
            prop::option::weighted(0.1, 0usize..14),
            prop::collection::vec(0u8..12, 0..4),
        ),
        prop::collection::vec((0usize..16, misuse()), 0..4),
    )
        .prop_map(
            |(
                (slot, ud, bind, param),
                (len, answer, server_first, second),
                destroy,
                (cut, pokes),
                misuse,
            )| {
                Plan {
                    slot,
                    ud,
                    bind,
                    param,
                    len,
                    answer,
                    server_first,
                    second_disconnect: second,
                    destroy,
                    cut,
                    pokes,
                    misuse,
                }
                .ops()
            },
        )
}

/// A case: 1 to 4 chunks, each a lifecycle (5 in 6) or 1 to 3 misuse calls, flattened. It
/// shrinks by dropping chunks and ops.
pub fn case() -> impl Strategy<Value = Vec<Op>> {
    let chunk = prop_oneof![
        5 => lifecycle(),
        1 => prop::collection::vec(misuse(), 1..4),
    ];
    prop::collection::vec(chunk, 1..5).prop_map(|chunks| chunks.concat())
}
