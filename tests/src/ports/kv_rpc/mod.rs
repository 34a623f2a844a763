//! A key-value RPC that survives its connection: a client issues a sequence of requests, each
//! with a client-chosen request id, one at a time; when its connection breaks (the peer's
//! disconnect, a flushed or failed completion, a CM error event, the device going away, or a
//! bounded wait running out) it tears the connection down and reconnects with backoff, then
//! sends the unanswered request again. The server keeps, per client, the last request id it
//! executed and its reply, across that client's connections: a request sent again is answered
//! from this cache and never executed twice, so every request the client reports as answered
//! was executed exactly once. The server re-listens when its device comes back after a removal.
//!
//! * [`messages`]: the wire format of requests and replies, the operations, and the reference
//!   model of the store ([`messages::apply`]) both sides and the tests share.
//! * [`wait`]: waiting for either a completion or a CM event, as one thread must.
//! * [`server`]: the server ([`server::serve`]).
//! * [`client`]: the client ([`client::run`]).
//! * [`faults`]: fault plans drawn from a seed; [`simulated`]: the server and the client as
//!   two processes of a simulated fabric under such a plan.
//!
//! Written once over `CmBackend + DataPath`: the `request_response` example runs it on the
//! simulator or on librdmacm, and `tests/sim_rpc.rs` runs it under seeded faults.

pub mod client;
pub mod faults;
pub mod messages;
pub mod server;
pub mod simulated;
pub mod wait;

use std::time::Duration;

use cmtwin::ConnParam;

/// The port the example listens on.
pub const DEFAULT_PORT: u16 = 7472;
/// The QPs' ACK timeout exponent (`RDMA_OPTION_ID_ACK_TIMEOUT`): 4.096 µs · 2^14 ≈ 67 ms per
/// transport retry, so a dead peer is detected in about half a second with
/// [`connect_param`]'s 7 retries, instead of the ≈ 17 s of the default path's exponent.
pub const ACK_TIMEOUT: u8 = 14;
/// Receives each server connection keeps posted (a client sends one request at a time, so
/// one would do; the spare ones cover a resend racing its connection's end).
pub const RECV_DEPTH: u32 = 4;
/// Replies a server connection may have in flight.
pub const SEND_DEPTH: u32 = 4;
/// The shortest and the longest slice a wait blocks on its completion channel before it looks
/// at the CM channel: a quiet connection looks less and less often.
pub const SLICE: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(128));

/// The connection parameters of both sides: 6 transport retries (7 would retry without end on
/// rxe, which counts down only below 7: a dead server would never fail a send), RNR retries
/// without end.
pub fn connect_param() -> ConnParam {
    ConnParam {
        retry_count: 6,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// A deterministic stream of draws from a seed (splitmix64), for request sequences and fault
/// plans.
#[derive(Clone, Debug)]
pub struct SeedDraws {
    state: u64,
}

impl SeedDraws {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> SeedDraws {
        SeedDraws { state: seed }
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A draw in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 => 0,
            n => self.next_u64() % n,
        }
    }

    /// True with `percent` per cent.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Checks a finished run of `requests` against the reference model: every request answered
/// as the model answers it, in order; every request executed exactly once by the server, and
/// nothing else; the server's store the model's.
pub fn verify(
    requests: &[messages::Message],
    client: &client::ClientReport,
    server: &server::ServerReport,
) -> Result<(), String> {
    if client.answered.len() != requests.len() {
        return Err(format!(
            "{} answers to {} requests",
            client.answered.len(),
            requests.len()
        ));
    }
    let mut model = std::collections::BTreeMap::new();
    for (req, reply) in requests.iter().zip(&client.answered) {
        let expected = messages::Message {
            value: messages::apply(&mut model, req.op, req.key, req.value),
            ..*req
        };
        if *reply != expected {
            return Err(format!("{reply:?} instead of {expected:?}"));
        }
        let runs = server.executions.get(&(req.client, req.request));
        if runs != Some(&1) {
            return Err(format!("request {} executed {runs:?} times", req.request));
        }
    }
    if server.executions.len() != requests.len() {
        return Err(format!(
            "{} requests executed, {} sent",
            server.executions.len(),
            requests.len()
        ));
    }
    if server.store != model {
        return Err(format!("store {:?} instead of {model:?}", server.store));
    }
    Ok(())
}
