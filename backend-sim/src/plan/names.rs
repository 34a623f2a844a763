//! How a plan writes message and event kinds: by their wire and librdmacm names (`"REQ"`,
//! `"ESTABLISHED"` or `"RDMA_CM_EVENT_ESTABLISHED"`).

use cmtwin::EventKind;

use crate::cm::messages::MessageKind;

/// Every message kind, in wire order.
pub(crate) const MESSAGE_KINDS: [MessageKind; MessageKind::ALL.len()] = MessageKind::ALL;

/// The message kind named `name` (`"REQ"`, case-insensitive).
pub(crate) fn message_kind_named(name: &str) -> Option<MessageKind> {
    MESSAGE_KINDS
        .into_iter()
        .find(|k| k.name().eq_ignore_ascii_case(name))
}

/// The event kind named `name`, with or without its `RDMA_CM_EVENT_` prefix.
pub(crate) fn event_kind_named(name: &str) -> Option<EventKind> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("RDMA_CM_EVENT_") {
        upper
    } else {
        format!("RDMA_CM_EVENT_{upper}")
    };
    EventKind::ALL.into_iter().find(|k| k.name() == full)
}

/// `#[serde(with)]` for a [`MessageKind`].
pub(crate) mod message_kind {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    use crate::cm::messages::MessageKind;

    pub(crate) fn serialize<S: Serializer>(kind: &MessageKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.name())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MessageKind, D::Error> {
        let name = String::deserialize(d)?;
        super::message_kind_named(&name).ok_or_else(|| {
            let known: Vec<&str> = MessageKind::ALL.iter().map(|k| k.name()).collect();
            D::Error::custom(format!(
                "unknown CM message kind {name:?} (one of {})",
                known.join(", ")
            ))
        })
    }
}

/// `#[serde(with)]` for an [`EventKind`](cmtwin::EventKind).
pub(crate) mod event_kind {
    use cmtwin::EventKind;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(kind: &EventKind, s: S) -> Result<S::Ok, S::Error> {
        let name = kind.name();
        s.serialize_str(name.strip_prefix("RDMA_CM_EVENT_").unwrap_or(name))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EventKind, D::Error> {
        let name = String::deserialize(d)?;
        super::event_kind_named(&name).ok_or_else(|| {
            D::Error::custom(format!(
                "unknown event kind {name:?} (a librdmacm event name such as ESTABLISHED)"
            ))
        })
    }
}
