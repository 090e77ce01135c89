//! Kafka's consumer protocol: the subscription a member sends in JoinGroup and the
//! assignment the leader hands out in SyncGroup, in Kafka's own encoding (versions
//! 0–3 read, version 1 written), so Shale clients and Kafka clients (librdkafka,
//! Java, kafka-python) can be members of one group. The Rust client encodes and decodes
//! with it; the broker's console decodes members' assignments with it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// A topic partition.
pub type TopicPartition = (String, i32);

/// One member's subscription (JoinGroup metadata).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub topics: Vec<String>,
    /// What it owned in the previous generation (the sticky assignor keeps it where
    /// balanced).
    pub owned: Vec<TopicPartition>,
}

/// A message that is not a consumer-protocol message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(&'static str);

type Result<T> = std::result::Result<T, Invalid>;

/// Subscription version written (1: with owned partitions, which the sticky
/// assignor uses).
const SUBSCRIPTION_VERSION: i16 = 1;
const ASSIGNMENT_VERSION: i16 = 1;

fn put_string(out: &mut BytesMut, s: &str) {
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

/// Topic partitions grouped by topic, as both messages carry them.
fn put_partitions(out: &mut BytesMut, parts: &[TopicPartition]) {
    let mut by_topic: Vec<(&str, Vec<i32>)> = Vec::new();
    for (t, p) in parts {
        match by_topic.iter_mut().find(|(topic, _)| topic == t) {
            Some((_, ps)) => ps.push(*p),
            None => by_topic.push((t, vec![*p])),
        }
    }
    out.put_i32(by_topic.len() as i32);
    for (topic, ps) in by_topic {
        put_string(out, topic);
        out.put_i32(ps.len() as i32);
        for p in ps {
            out.put_i32(p);
        }
    }
}

pub fn encode_subscription(s: &Subscription) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(SUBSCRIPTION_VERSION);
    out.put_i32(s.topics.len() as i32);
    for t in &s.topics {
        put_string(&mut out, t);
    }
    out.put_i32(-1); // no user data
    put_partitions(&mut out, &s.owned);
    out.freeze()
}

pub fn encode_assignment(parts: &[TopicPartition]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(ASSIGNMENT_VERSION);
    put_partitions(&mut out, parts);
    out.put_i32(-1); // no user data
    out.freeze()
}

/// A cursor over a consumer-protocol message that fails instead of panicking.
struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<()> {
        if self.0.remaining() < n {
            return Err(Invalid("truncated consumer-protocol message"));
        }
        Ok(())
    }

    fn i16(&mut self) -> Result<i16> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }

    fn i32(&mut self) -> Result<i32> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }

    fn string(&mut self) -> Result<String> {
        let n = self.i16()?;
        if n < 0 {
            return Err(Invalid("null string in a consumer-protocol message"));
        }
        self.need(n as usize)?;
        let raw = self.0.split_to(n as usize);
        String::from_utf8(raw.to_vec()).map_err(|_| Invalid("non-UTF-8 topic name"))
    }

    /// An array's length (a null array is empty).
    fn count(&mut self) -> Result<usize> {
        let n = self.i32()?;
        if n > 1_000_000 {
            return Err(Invalid("oversized array in a consumer-protocol message"));
        }
        Ok(n.max(0) as usize)
    }

    fn skip_bytes(&mut self) -> Result<()> {
        let n = self.i32()?;
        if n > 0 {
            self.need(n as usize)?;
            self.0.advance(n as usize);
        }
        Ok(())
    }

    fn partitions(&mut self) -> Result<Vec<TopicPartition>> {
        let mut out = Vec::new();
        for _ in 0..self.count()? {
            let topic = self.string()?;
            for _ in 0..self.count()? {
                out.push((topic.clone(), self.i32()?));
            }
        }
        Ok(out)
    }

    fn at_end(&self) -> bool {
        !self.0.has_remaining()
    }
}

pub fn decode_subscription(bytes: Bytes) -> Result<Subscription> {
    let mut r = Reader(bytes);
    let version = r.i16()?;
    let topics = (0..r.count()?)
        .map(|_| r.string())
        .collect::<Result<Vec<_>>>()?;
    // User data may be missing altogether in v0 messages of old clients.
    if r.at_end() {
        return Ok(Subscription {
            topics,
            owned: Vec::new(),
        });
    }
    r.skip_bytes()?;
    let owned = if version >= 1 && !r.at_end() {
        r.partitions()?
    } else {
        Vec::new()
    };
    Ok(Subscription { topics, owned })
}

pub fn decode_assignment(bytes: Bytes) -> Result<Vec<TopicPartition>> {
    if bytes.is_empty() {
        // A member the leader gave nothing.
        return Ok(Vec::new());
    }
    let mut r = Reader(bytes);
    let _version = r.i16()?;
    r.partitions()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_and_assignments_round_trip() {
        let s = Subscription {
            topics: vec!["a".into(), "b".into()],
            owned: vec![("a".into(), 0), ("a".into(), 2), ("b".into(), 1)],
        };
        assert_eq!(decode_subscription(encode_subscription(&s)).unwrap(), s);
        let parts = vec![("x".to_string(), 3), ("y".to_string(), 0)];
        assert_eq!(decode_assignment(encode_assignment(&parts)).unwrap(), parts);
        assert!(decode_assignment(Bytes::new()).unwrap().is_empty());
    }

    /// What librdkafka sends: a v0 subscription, and one with a rack (v3).
    #[test]
    fn other_clients_encodings_decode() {
        let mut v0 = BytesMut::new();
        v0.put_i16(0);
        v0.put_i32(1);
        put_string(&mut v0, "logs");
        v0.put_i32(-1);
        let s = decode_subscription(v0.freeze()).unwrap();
        assert_eq!((s.topics, s.owned.len()), (vec!["logs".to_string()], 0));
        let mut v3 = BytesMut::new();
        v3.put_i16(3);
        v3.put_i32(1);
        put_string(&mut v3, "logs");
        v3.put_i32(2);
        v3.put_slice(b"ud");
        put_partitions(&mut v3, &[("logs".into(), 4)]);
        v3.put_i32(7); // generation
        v3.put_i16(-1); // rack
        let s = decode_subscription(v3.freeze()).unwrap();
        assert_eq!(s.owned, vec![("logs".to_string(), 4)]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"\x00",
            b"\x00\x01\x00\x00\x00\x05",
            b"\x00\x00\x7f\xff\xff\xff",
        ] {
            assert!(
                decode_subscription(Bytes::copy_from_slice(bad)).is_err(),
                "{bad:?}"
            );
        }
        assert!(decode_assignment(Bytes::from_static(b"\x00\x00\x00\x00\x00\x01\x00")).is_err());
    }
}
