//! The wire format of the key-value RPC (five little-endian u64: client, request id,
//! operation, key, value), its operations, the reference model of the store, and seeded
//! request sequences.

use std::collections::BTreeMap;

use cmtwin::{CmError, Result};

use super::SeedDraws;

/// Bytes of a request or a reply.
pub const MSG_LEN: usize = 40;

/// An operation of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// Stores `value` under `key`; answers the previous value (0 if none).
    Put,
    /// Answers the value under `key` (0 if none).
    Get,
    /// Adds `value` to the value under `key` (wrapping) and answers the sum: not idempotent,
    /// so a second execution shows in every later answer for the key.
    Add,
    /// The client's last request: answers 0, and the server ends once its answer is delivered.
    Bye,
    /// The server's answer to a request older than the last one it executed for the client
    /// (a protocol error of the client).
    Stale,
}

impl Op {
    fn code(self) -> u64 {
        match self {
            Op::Put => 1,
            Op::Get => 2,
            Op::Add => 3,
            Op::Bye => 4,
            Op::Stale => 255,
        }
    }

    fn from_code(code: u64) -> Option<Op> {
        Some(match code {
            1 => Op::Put,
            2 => Op::Get,
            3 => Op::Add,
            4 => Op::Bye,
            255 => Op::Stale,
            _ => return None,
        })
    }
}

/// A request (and, with the answer in `value`, a reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// The client's identity, chosen by the client and kept across its connections.
    pub client: u64,
    /// The request id, counting from 1 per client.
    pub request: u64,
    /// The operation.
    pub op: Op,
    /// The key.
    pub key: u64,
    /// The operand of a request, or the answer of a reply.
    pub value: u64,
}

impl Message {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut m = [0u8; MSG_LEN];
        let fields = [
            self.client,
            self.request,
            self.op.code(),
            self.key,
            self.value,
        ];
        for (i, v) in fields.into_iter().enumerate() {
            m[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        m
    }

    /// Reads a message of `byte_len` bytes; an error names what is wrong with it.
    pub fn decode(m: &[u8; MSG_LEN], byte_len: u32) -> Result<Message> {
        if byte_len as usize != MSG_LEN {
            return Err(CmError::application(format!(
                "a message of {byte_len} bytes instead of {MSG_LEN}"
            )));
        }
        let field = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&m[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        let op = Op::from_code(field(2))
            .ok_or_else(|| CmError::application(format!("unknown operation {}", field(2))))?;
        Ok(Message {
            client: field(0),
            request: field(1),
            op,
            key: field(3),
            value: field(4),
        })
    }
}

/// Executes `op` on `store` (the reference model: the server's store and the client's check
/// both follow it) and returns the answer.
pub fn apply(store: &mut BTreeMap<u64, u64>, op: Op, key: u64, value: u64) -> u64 {
    match op {
        Op::Put => store.insert(key, value).unwrap_or(0),
        Op::Get => store.get(&key).copied().unwrap_or(0),
        Op::Add => {
            let sum = store.get(&key).copied().unwrap_or(0).wrapping_add(value);
            store.insert(key, sum);
            sum
        }
        Op::Bye | Op::Stale => 0,
    }
}

/// `count` requests of `client` drawn from `seed` over `keys` keys (PUTs, GETs and ADDs, ids
/// 1..=count), then a BYE (id count + 1).
pub fn requests(client: u64, seed: u64, count: u64, keys: u64) -> Vec<Message> {
    let mut draws = SeedDraws::new(seed ^ 0x6b76_5f72_7063_0001);
    let keys = keys.max(1);
    let mut out: Vec<Message> = (1..=count)
        .map(|request| {
            let draw = draws.next_u64();
            let op = [Op::Put, Op::Get, Op::Add][(draw % 3) as usize];
            Message {
                client,
                request,
                op,
                key: 1 + (draw >> 8) % keys,
                value: (draw >> 32) % 1000,
            }
        })
        .collect();
    out.push(Message {
        client,
        request: count + 1,
        op: Op::Bye,
        key: 0,
        value: 0,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_and_a_bad_one_is_refused() {
        let m = Message {
            client: 7,
            request: 3,
            op: Op::Add,
            key: 2,
            value: 99,
        };
        assert_eq!(Message::decode(&m.encode(), MSG_LEN as u32), Ok(m));
        let short = Message::decode(&m.encode(), 39).unwrap_err();
        assert!(short.to_string().contains("39 bytes"), "{short}");
        let mut bad = m.encode();
        bad[16] = 9;
        let unknown = Message::decode(&bad, MSG_LEN as u32).unwrap_err();
        assert!(
            unknown.to_string().contains("unknown operation 9"),
            "{unknown}"
        );
    }

    #[test]
    fn add_executed_twice_shows_in_the_answer() {
        let mut once = BTreeMap::new();
        let mut twice = BTreeMap::new();
        assert_eq!(apply(&mut once, Op::Put, 1, 5), 0);
        assert_eq!(apply(&mut twice, Op::Put, 1, 5), 0);
        assert_eq!(apply(&mut once, Op::Add, 1, 3), 8);
        apply(&mut twice, Op::Add, 1, 3);
        assert_eq!(apply(&mut twice, Op::Add, 1, 3), 11);
        assert_eq!(apply(&mut once, Op::Get, 1, 0), 8);
    }

    #[test]
    fn a_sequence_is_the_seeds_and_ends_with_bye() {
        let a = requests(1, 42, 20, 3);
        assert_eq!(a, requests(1, 42, 20, 3));
        assert_ne!(a, requests(1, 43, 20, 3));
        assert_eq!(a.len(), 21);
        assert_eq!(a[20].op, Op::Bye);
        assert!(a.iter().enumerate().all(|(i, m)| m.request == i as u64 + 1));
        assert!(a[..20].iter().all(|m| (1..=3).contains(&m.key)));
        assert!(a.iter().any(|m| m.op == Op::Add) && a.iter().any(|m| m.op == Op::Get));
    }
}
