//! The model's state: every id and channel a case created, with the state the kernel keeps for
//! it (cma.c's `rdma_cm_state`, refined by what the IB CM or iWARP CM underneath is doing), the
//! connection slots and the listeners.

use std::net::SocketAddr;

use cmtwin::{ChannelHandle, IdHandle};

use super::op::{Target, SLOTS};

/// The slot of the bed's third host (an active side besides the client), where it has one:
/// its client ids and channel live there, and connect to the same server.
pub const THIRD_SLOT: usize = SLOTS;

/// What the model knows of one id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdState {
    /// Created, nothing else (IDLE).
    Idle,
    /// Bound to its host's address (ADDR_BOUND).
    AddrBound,
    /// ADDR_RESOLVED delivered (ADDR_RESOLVED).
    AddrResolved,
    /// ROUTE_RESOLVED delivered (ROUTE_RESOLVED).
    RouteResolved,
    /// Listening (LISTEN).
    Listen,
    /// CONNECT, not answered yet: an active id whose request reached a listener, or a passive
    /// child whose CONNECT_REQUEST was delivered.
    Requested,
    /// CONNECT, refused: an active id after REJECTED, or a child after `rdma_reject` (or after
    /// a failed accept). Only destroy is meaningful (CM-SEMANTICS §3.4).
    Refused,
    /// CONNECT: a child whose initiator destroyed its id before any answer (REJ 4 received by
    /// the server's CM, no event, §7.4).
    Abandoned,
    /// ESTABLISHED delivered (CONNECT, IB CM ESTABLISHED).
    Established,
    /// IB and RoCE: this side called `rdma_disconnect` first (IB CM DREQ_SENT); no DISCONNECTED
    /// yet (CONNECT).
    DreqSent,
    /// IB and RoCE: DISCONNECTED delivered for the peer's DREQ, not answered yet (DISCONNECT,
    /// IB CM DREQ_RCVD).
    DreqReceived,
    /// DISCONNECTED delivered, and on IB and RoCE TIMEWAIT_EXIT too: nothing more comes
    /// (DISCONNECT).
    Closed,
    /// A UD exchange is over (ESTABLISHED or UNREACHABLE delivered, or the request answered):
    /// only destroy is predicted.
    Datagram,
    /// Destroyed: every call on it is ENOENT.
    Destroyed,
}

/// One id of the case.
#[derive(Clone, Debug)]
pub struct ModelId {
    /// Its handle.
    pub handle: IdHandle,
    /// On the server's backend (else the client's, or the third host's).
    pub server: bool,
    /// On the bed's third host.
    pub third: bool,
    /// Index of its channel in [`World::channels`].
    pub channel: usize,
    /// Its state.
    pub state: IdState,
    /// It has a QP.
    pub qp: bool,
    /// In the UDP port space (UD, SIDR exchanges), else TCP.
    pub ud: bool,
    /// It listens on the wildcard address (a listen from IDLE auto-binds to 0.0.0.0).
    pub wildcard: bool,
    /// The other end of its connection attempt, if any.
    pub peer: Option<usize>,
    /// Where its address was resolved to.
    pub dst: Option<SocketAddr>,
    /// The address it listens on, for the server's listeners.
    pub listen_addr: Option<SocketAddr>,
}

impl ModelId {
    /// A new id in IDLE (`ud`: in the UDP port space).
    pub fn new(handle: IdHandle, server: bool, channel: usize, ud: bool) -> Self {
        ModelId {
            handle,
            server,
            third: false,
            channel,
            state: IdState::Idle,
            qp: false,
            ud,
            wildcard: false,
            peer: None,
            dst: None,
            listen_addr: None,
        }
    }

    /// Not destroyed.
    pub fn live(&self) -> bool {
        self.state != IdState::Destroyed
    }
}

/// One event channel of the case.
#[derive(Clone, Copy, Debug)]
pub struct ModelChannel {
    /// Its handle.
    pub handle: ChannelHandle,
    /// On the server's backend (else the client's, or the third host's).
    pub server: bool,
    /// On the bed's third host.
    pub third: bool,
    /// Not destroyed.
    pub live: bool,
}

/// One connection slot: a client channel, its latest id and the server's child of its latest
/// request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Slot {
    /// Index of the slot's channel in [`World::channels`].
    pub channel: Option<usize>,
    /// Index of the latest client id.
    pub client: Option<usize>,
    /// Index of the server's child of the latest request.
    pub child: Option<usize>,
}

/// Everything the model knows of a case.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// Every id created, in order.
    pub ids: Vec<ModelId>,
    /// Every channel created, in order.
    pub channels: Vec<ModelChannel>,
    /// The connection slots, the third host's last ([`THIRD_SLOT`]).
    pub slots: [Slot; SLOTS + 1],
    /// The server's channel (listeners and children).
    pub server_channel: Option<usize>,
    /// The latest listener.
    pub listener: Option<usize>,
    /// The latest listener's address, where TCP ids' resolutions aim.
    pub dst: Option<SocketAddr>,
    /// The latest UDP listener's address, where UDP ids' resolutions aim.
    pub ud_dst: Option<SocketAddr>,
}

impl World {
    /// The index of the id `target` names, if it exists.
    pub fn target(&self, target: Target) -> Option<usize> {
        match target {
            Target::Client(slot) => self.slots[slot].client,
            Target::Child(slot) => self.slots[slot].child,
            Target::Listener => self.listener,
            Target::Any(n) if !self.ids.is_empty() => Some(n % self.ids.len()),
            Target::Any(_) => None,
        }
    }

    /// The index of a slot's channel (or the server's).
    pub fn channel_of(&self, slot: Option<usize>) -> Option<usize> {
        match slot {
            Some(slot) => self.slots[slot].channel,
            None => self.server_channel,
        }
    }

    /// Whether any live id delivers its events to channel `ch`.
    pub fn channel_in_use(&self, ch: usize) -> bool {
        self.ids.iter().any(|id| id.live() && id.channel == ch)
    }

    /// The live listener of the port space (`ud`: UDP) on `addr`, if any.
    pub fn listener_on(&self, addr: SocketAddr, ud: bool) -> Option<usize> {
        self.ids.iter().position(|id| {
            id.live() && id.state == IdState::Listen && id.ud == ud && id.listen_addr == Some(addr)
        })
    }

    /// Where an id of the port space (`ud`: UDP) resolves to.
    pub fn dst_for(&self, ud: bool) -> Option<SocketAddr> {
        if ud {
            self.ud_dst
        } else {
            self.dst
        }
    }

    /// Adds an id and returns its index.
    pub fn add_id(&mut self, id: ModelId) -> usize {
        self.ids.push(id);
        self.ids.len() - 1
    }

    /// Adds a channel and returns its index.
    pub fn add_channel(&mut self, handle: ChannelHandle, server: bool) -> usize {
        self.channels.push(ModelChannel {
            handle,
            server,
            third: false,
            live: true,
        });
        self.channels.len() - 1
    }
}

impl World {
    /// How many active hosts (the client, the third host) have an established connection now.
    pub fn hosts_connected(&self) -> usize {
        let on = |third: bool| {
            self.ids.iter().any(|id| {
                !id.server && id.third == third && id.live() && id.state == IdState::Established
            })
        };
        usize::from(on(false)) + usize::from(on(true))
    }
}
