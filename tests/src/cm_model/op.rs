//! The operations the CM model drives, and the proptest strategy that draws sequences of them:
//! mostly well-formed connection lifecycles (create, resolve, route, QP, connect, accept or
//! reject, disconnect, destroy) with misuse calls and stale handles sprinkled in. The same
//! lifecycles and ops also come from arbitrary bytes ([`Chunk`], for the fuzz target
//! `cm_model`): every value `arbitrary` builds is one the model handles (slots and private data
//! lengths are drawn among the valid ones).

use arbitrary::{Arbitrary, Unstructured};
use proptest::prelude::*;

/// How many connection slots a case uses: each slot is one client channel, the latest client
/// id created on it, and the server's child id of that client's request.
pub const SLOTS: usize = 2;

/// The id an operation acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum Target {
    /// The latest client id of a slot.
    Client(#[arbitrary(with = slot)] usize),
    /// The server's child id of the slot's latest request.
    Child(#[arbitrary(with = slot)] usize),
    /// The server's latest listener.
    Listener,
    /// Any id ever created in the case, destroyed ones included (index modulo their number).
    Any(usize),
}

/// One step of a case. Every step the model can predict exactly is made and checked; a step
/// whose target does not exist, or whose outcome the model does not know exactly (see
/// `cm_model::predict`), is not made and counted apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum Op {
    /// A client channel for the slot (if it has none or it was destroyed) and a TCP id on it,
    /// or a UDP id (IB and RoCE only: iWARP has no UD, CM-SEMANTICS §13.2, and gets a TCP id).
    NewClient {
        /// The slot.
        #[arbitrary(with = slot)]
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
        #[arbitrary(with = data_len)]
        len: u8,
    },
    /// `rdma_listen` with backlog 8.
    Listen(Target),
    /// `rdma_accept` with parameters and `len` bytes of private data.
    Accept {
        /// The id.
        target: Target,
        /// Private data length.
        #[arbitrary(with = data_len)]
        len: u8,
    },
    /// `rdma_reject` with `len` bytes of private data.
    Reject {
        /// The id.
        target: Target,
        /// Private data length.
        #[arbitrary(with = data_len)]
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
        #[arbitrary(with = slot)]
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
        #[arbitrary(with = server_or_slot)]
        slot: Option<usize>,
    },
    /// A call with the CM message it sends lost on the wire `lost` times (1 or 2), on beds
    /// with the hook (`Need::CmMessageLoss`: the simulator, IB and RoCE): made only where the
    /// model predicts that the call succeeds and sends that message, so the IB CM's
    /// retransmission (§15.2) brings the same events, later.
    Lossy {
        /// The id.
        target: Target,
        /// The call and the message lost.
        call: LossyCall,
        /// How many times in a row.
        #[arbitrary(with = losses)]
        lost: u8,
    },
    /// `rdma_destroy_event_channel` (the slot's, or the server's).
    DestroyChannel {
        /// The slot whose channel (else the server's).
        #[arbitrary(with = server_or_slot)]
        slot: Option<usize>,
    },
}

/// A call that sends one CM message, and that message lost on the wire ([`Op::Lossy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Arbitrary)]
pub enum LossyCall {
    /// `rdma_connect` (with parameters), its REQ lost.
    ConnectReq,
    /// `rdma_accept`, its REP lost.
    AcceptRep,
    /// `rdma_accept`, the initiator's RTU that answers it lost.
    AcceptRtu,
    /// `rdma_disconnect` of an established id, its DREQ lost.
    DisconnectDreq,
}

/// The calls [`Op::OverMax`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum OverMaxCall {
    /// `rdma_connect`.
    Connect,
    /// `rdma_accept`.
    Accept,
    /// `rdma_reject`.
    Reject,
}

/// How the server answers a slot's request in a lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
enum Answer {
    Accept,
    Reject,
    DestroyChild,
    DestroyClient,
    Nothing,
}

/// One lifecycle's choices (the ops of [`Lifecycle::ops`]): drawn by the proptest strategy
/// ([`case`]), or built from arbitrary bytes by the fuzz target ([`Chunk`]).
#[derive(Clone, Debug, Arbitrary)]
pub struct Lifecycle {
    #[arbitrary(with = slot)]
    slot: usize,
    ud: bool,
    bind: bool,
    param: bool,
    #[arbitrary(with = data_len)]
    len: u8,
    answer: Answer,
    server_first: bool,
    second_disconnect: bool,
    destroy: Option<bool>,
    cut: Option<usize>,
    pokes: Vec<u8>,
    misuse: Vec<(usize, Op)>,
    /// The call of the lifecycle whose CM message is lost, and how many times.
    #[arbitrary(with = loss)]
    loss: Option<(LossyCall, u8)>,
}

/// A lifecycle's loss from arbitrary bytes.
fn loss(u: &mut Unstructured) -> arbitrary::Result<Option<(LossyCall, u8)>> {
    Ok(if u.arbitrary()? {
        Some((u.arbitrary()?, losses(u)?))
    } else {
        None
    })
}

impl Lifecycle {
    /// The lifecycle's ops, in order.
    pub fn ops(&self) -> Vec<Op> {
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
        let lossy = |target, call: LossyCall| {
            self.loss
                .filter(|(lost, _)| *lost == call)
                .map(|(call, lost)| Op::Lossy { target, call, lost })
        };
        ops.push(lossy(client, LossyCall::ConnectReq).unwrap_or(Op::Connect {
            target: client,
            param: self.param,
            len: self.len,
        }));
        ops.extend(pending.iter().map(|kind| poke(*kind, client, child)));
        match self.answer {
            Answer::Accept => ops.extend([
                Op::CreateQp(child),
                lossy(child, LossyCall::AcceptRep)
                    .or(lossy(child, LossyCall::AcceptRtu))
                    .unwrap_or(Op::Accept {
                        target: child,
                        len: self.len,
                    }),
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
            ops.push(lossy(first, LossyCall::DisconnectDreq).unwrap_or(Op::Disconnect(first)));
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

/// A slot index from arbitrary bytes.
fn slot(u: &mut Unstructured) -> arbitrary::Result<usize> {
    u.choose_index(SLOTS)
}

/// A slot index or none (the server's channel) from arbitrary bytes.
fn server_or_slot(u: &mut Unstructured) -> arbitrary::Result<Option<usize>> {
    Ok(if u.arbitrary()? { Some(slot(u)?) } else { None })
}

/// How many times a message is lost in a row (1 or 2: the retries stay within the model's
/// wait for an event) from arbitrary bytes.
fn losses(u: &mut Unstructured) -> arbitrary::Result<u8> {
    u.int_in_range(1..=2)
}

/// A private data length the model predicts (see [`len`]) from arbitrary bytes.
fn data_len(u: &mut Unstructured) -> arbitrary::Result<u8> {
    u.choose(&DATA_LENS).copied()
}

/// The private data lengths of connects, accepts and rejects: none, some, and the most a
/// REQ carries on IB and RoCE (CM-SEMANTICS §6.1).
const DATA_LENS: [u8; 3] = [0, 16, 56];

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
    prop_oneof![Just(DATA_LENS[0]), Just(DATA_LENS[1]), Just(DATA_LENS[2])]
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
fn lifecycle() -> impl Strategy<Value = Lifecycle> {
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
                Lifecycle {
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
                    loss: None,
                }
            },
        )
}

/// One lifecycle in three with a CM message of it lost once or twice ([`Op::Lossy`]).
fn lossy_lifecycle() -> impl Strategy<Value = Lifecycle> {
    let call = prop_oneof![
        Just(LossyCall::ConnectReq),
        Just(LossyCall::AcceptRep),
        Just(LossyCall::AcceptRtu),
        Just(LossyCall::DisconnectDreq),
    ];
    (
        lifecycle(),
        prop::option::weighted(1.0 / 3.0, (call, 1u8..=2)),
    )
        .prop_map(|(mut lifecycle, loss)| {
            lifecycle.loss = loss;
            lifecycle
        })
}

/// What a campaign's cases may contain beyond calls, as the bed allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Draws {
    /// Lifecycles with a CM message lost ([`Op::Lossy`], `Need::CmMessageLoss`).
    pub cm_message_loss: bool,
    /// Lifecycles on the bed's third host (`TestBed::third`, slot
    /// [`THIRD_SLOT`](super::state::THIRD_SLOT)).
    pub third_host: bool,
}

impl Draws {
    /// What `bed` can give.
    pub fn for_bed(bed: &impl crate::TestBed) -> Self {
        Draws {
            cm_message_loss: bed.lacks(crate::capability::Need::CmMessageLoss).is_none(),
            third_host: bed.third().is_some(),
        }
    }
}

/// A case: 1 to 4 chunks, each a lifecycle (5 in 6) or 1 to 3 misuse calls, flattened. It
/// shrinks by dropping chunks and ops. Without any of `draws`, the cases are the same as
/// before faults existed (the strategy draws nothing more).
pub fn case(draws: Draws) -> BoxedStrategy<Vec<Op>> {
    let lifecycle = if draws.cm_message_loss {
        lossy_lifecycle().boxed()
    } else {
        lifecycle().boxed()
    };
    let chunk = if draws.third_host {
        // Two lifecycles at once, the second on the third host, run inside the first before
        // it ends its connection: two pairs connected to the server at once.
        let pair = (lifecycle.clone(), lifecycle.clone()).prop_map(|(first, mut second)| {
            second.slot = super::state::THIRD_SLOT;
            nest(first.ops(), second.ops())
        });
        prop_oneof![
            5 => lifecycle.prop_map(|l| l.ops()),
            1 => prop::collection::vec(misuse(), 1..4),
            2 => pair,
        ]
        .boxed()
    } else {
        prop_oneof![
            5 => lifecycle.prop_map(|l| l.ops()),
            1 => prop::collection::vec(misuse(), 1..4),
        ]
        .boxed()
    };
    prop::collection::vec(chunk, 1..5)
        .prop_map(|chunks| chunks.concat())
        .boxed()
}

/// `inner`'s ops run inside `outer`'s, before `outer` first disconnects or destroys an id.
fn nest(mut outer: Vec<Op>, inner: Vec<Op>) -> Vec<Op> {
    let at = outer
        .iter()
        .position(|op| {
            matches!(
                op,
                Op::Disconnect(_)
                    | Op::DestroyId(_)
                    | Op::Lossy {
                        call: LossyCall::DisconnectDreq,
                        ..
                    }
            )
        })
        .unwrap_or(outer.len());
    outer.splice(at..at, inner);
    outer
}

/// A piece of a case built from arbitrary bytes (the fuzz target `cm_model`): a lifecycle as
/// the proptest strategy draws them, or one op of any kind.
#[derive(Clone, Debug, Arbitrary)]
pub enum Chunk {
    /// A connection lifecycle on a slot.
    Lifecycle(Lifecycle),
    /// One op.
    Op(Op),
}

impl Chunk {
    /// The ops of `chunks`, in order.
    pub fn ops(chunks: &[Chunk]) -> Vec<Op> {
        chunks
            .iter()
            .flat_map(|chunk| match chunk {
                Chunk::Lifecycle(l) => l.ops(),
                Chunk::Op(op) => vec![*op],
            })
            .collect()
    }
}
