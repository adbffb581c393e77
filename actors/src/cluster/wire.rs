//! What hosts send each other: one edge frame in an envelope, as JSON bytes in ractor's
//! serialized cast.
//!
//! The host actor's message is the only message type that crosses nodes. Its payload is
//! decoded strictly; a payload that does not decode is logged and dropped by the receiving
//! host (ractor_cluster would drop it silently otherwise), and the edge's sequence numbers
//! make the sender replay what was lost.

use agent_tree_protocol::{Down, Frame, Up};
use ractor::BytesConvertable as _;
use ractor::message::{BoxedDowncastErr, SerializedMessage};
use serde::{Deserialize, Serialize};

/// The host actor's one message: an encoded [`Envelope`].
#[derive(Debug)]
pub(crate) struct HostMsg(pub(crate) Vec<u8>);

impl ractor::Message for HostMsg {
    fn serializable() -> bool {
        true
    }

    fn serialize(self) -> Result<SerializedMessage, BoxedDowncastErr> {
        Ok(SerializedMessage::Cast {
            variant: "edge_frame".into(),
            args: self.0.into_bytes(),
            metadata: None,
        })
    }

    fn deserialize(bytes: SerializedMessage) -> Result<Self, BoxedDowncastErr> {
        match bytes {
            SerializedMessage::Cast { args, .. } => Ok(HostMsg(Vec::from_bytes(args))),
            _ => Err(BoxedDowncastErr),
        }
    }
}

/// One frame of one edge, with who sent it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Envelope {
    /// The edge: unique per owner's node process (its boot id is in it).
    pub(crate) edge: String,
    /// The sending node's name (its host's process group).
    pub(crate) from: String,
    /// The sending node process's boot id: a node that comes back with another one is a
    /// new process, whose hosted subtrees (or stand-ins) are gone.
    pub(crate) boot: u64,
    /// The frame.
    pub(crate) frame: Directed,
}

/// A frame and its direction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "dir",
    content = "frame",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub(crate) enum Directed {
    /// Owner's node → child's node.
    Down(Frame<Down>),
    /// Child's node → owner's node.
    Up(Frame<Up>),
}

impl Envelope {
    /// The host message carrying it.
    pub(crate) fn encode(&self) -> HostMsg {
        // A frame of plain data always serializes.
        HostMsg(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Reads a host message; `Err` says why it is not an envelope.
    pub(crate) fn decode(message: &HostMsg) -> Result<Envelope, serde_json::Error> {
        serde_json::from_slice(&message.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_tree_protocol::{Command, Down};

    #[test]
    fn an_envelope_round_trips_through_ractors_serialized_cast() {
        let envelope = Envelope {
            edge: "owner:1f:a3:1".into(),
            from: "owner".into(),
            boot: 31,
            frame: Directed::Down(Frame {
                seq: 1,
                ack: 0,
                body: Down::Command {
                    command: Command::Abort {
                        agent: "a3".parse().unwrap(),
                    },
                },
            }),
        };
        let serialized = ractor::Message::serialize(envelope.encode()).unwrap();
        let back = <HostMsg as ractor::Message>::deserialize(serialized).unwrap();
        assert_eq!(Envelope::decode(&back).unwrap(), envelope);
    }

    #[test]
    fn a_payload_that_is_not_an_envelope_is_an_error_never_a_panic() {
        for bytes in [&b""[..], b"{", b"{\"edge\":1}", &[0xff, 0xfe]] {
            assert!(Envelope::decode(&HostMsg(bytes.to_vec())).is_err());
        }
        let extra = br#"{"edge":"e","from":"n","boot":1,"frame":{"dir":"up","frame":{"seq":0,"ack":0,"body":{"kind":"ack"}}},"x":1}"#;
        assert!(Envelope::decode(&HostMsg(extra.to_vec())).is_err());
    }

    /// The module promises strict decoding: a key the wire form does not have is an error,
    /// at every level of the envelope (as at its top, above), not only at its top.
    #[test]
    fn an_unknown_key_in_the_directed_frame_is_refused() {
        let good = br#"{"edge":"e","from":"n","boot":1,"frame":{"dir":"up","frame":{"seq":0,"ack":0,"body":{"kind":"ack"}}}}"#;
        assert!(Envelope::decode(&HostMsg(good.to_vec())).is_ok());
        let extra = br#"{"edge":"e","from":"n","boot":1,"frame":{"dir":"up","frame":{"seq":0,"ack":0,"body":{"kind":"ack"}},"x":1}}"#;
        assert!(
            Envelope::decode(&HostMsg(extra.to_vec())).is_err(),
            "decoded: {:?}",
            Envelope::decode(&HostMsg(extra.to_vec()))
        );
    }
}
