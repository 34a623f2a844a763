//! The connection manager's protocol, apart from the world: the wire formats
//! ([`messages`]) and one endpoint of one connection attempt as a sans-IO state machine
//! ([`endpoint`]): it takes inputs (a call, a received message, its timer firing) and returns
//! outputs (messages to send, its timer to set or cancel, events for its id), and never
//! touches the world, the clock or the wire itself.

pub(crate) mod endpoint;
pub(crate) mod messages;
