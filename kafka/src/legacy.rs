//! Request versions that Kafka 3.9 still accepts but the `kafka-protocol` codec no
//! longer reads (Kafka 4.0 dropped them, KIP-896): Produce 0–2, Fetch 0–3,
//! ListOffsets 0, OffsetCommit 0–1, OffsetFetch 0, CreateTopics 0–1, DeleteTopics 0,
//! DescribeConfigs 0, OffsetForLeaderEpoch 0–1, and the ACL APIs' v0. Each is read
//! by hand into the codec's message of the lowest version it has, so the usual
//! handler serves it; its answer is written back by hand in the old layout
//! (`handlers::legacy`). Produce's records stay in the old message format here: the
//! handler converts them.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// The lowest version of `api` that the codec reads, where it is above 0.
pub fn codec_min(api: ApiKey) -> i16 {
    match api {
        ApiKey::Produce => 3,
        ApiKey::Fetch => 4,
        ApiKey::ListOffsets | ApiKey::OffsetFetch | ApiKey::DeleteTopics => 1,
        ApiKey::DescribeConfigs | ApiKey::CreateAcls | ApiKey::DescribeAcls => 1,
        ApiKey::DeleteAcls => 1,
        ApiKey::OffsetCommit | ApiKey::CreateTopics | ApiKey::OffsetForLeaderEpoch => 2,
        _ => 0,
    }
}

/// Whether `version` of `api` is read and answered here.
pub fn is_legacy(api: ApiKey, version: i16) -> bool {
    version < codec_min(api)
}

/// ACL pattern type of the v0 ACL APIs (a name, matched literally).
const LITERAL: i8 = 3;

/// A request body being read.
pub struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> anyhow::Result<()> {
        anyhow::ensure!(self.0.remaining() >= n, "truncated request");
        Ok(())
    }
    pub fn i8(&mut self) -> anyhow::Result<i8> {
        self.need(1)?;
        Ok(self.0.get_i8())
    }
    pub fn i16(&mut self) -> anyhow::Result<i16> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }
    pub fn i32(&mut self) -> anyhow::Result<i32> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }
    pub fn i64(&mut self) -> anyhow::Result<i64> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }
    /// An array's length; each element takes at least `min` bytes.
    pub fn count(&mut self, min: usize) -> anyhow::Result<usize> {
        let n = self.i32()?;
        anyhow::ensure!(n >= 0, "a null or negative array");
        let n = n as usize;
        anyhow::ensure!(
            n * min <= self.0.remaining(),
            "an array longer than the request"
        );
        Ok(n)
    }
    pub fn nullable_string(&mut self) -> anyhow::Result<Option<StrBytes>> {
        let n = self.i16()?;
        if n < 0 {
            return Ok(None);
        }
        self.need(n as usize)?;
        let b = self.0.split_to(n as usize);
        Ok(Some(StrBytes::from_utf8(b)?))
    }
    pub fn string(&mut self) -> anyhow::Result<StrBytes> {
        self.nullable_string()?
            .ok_or_else(|| anyhow::anyhow!("a null string"))
    }
    pub fn bytes(&mut self) -> anyhow::Result<Option<Bytes>> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        self.need(n as usize)?;
        Ok(Some(self.0.split_to(n as usize)))
    }
    fn end(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.0.is_empty(), "bytes after the request");
        Ok(())
    }
}

/// Reads a legacy request's body.
pub fn decode(api: ApiKey, version: i16, body: Bytes) -> anyhow::Result<RequestKind> {
    // Layouts equal to the codec's lowest version, but for fields added at its end.
    let as_codec = |extra: &[u8], v: i16| -> anyhow::Result<RequestKind> {
        let mut b = BytesMut::from(&body[..]);
        b.put_slice(extra);
        RequestKind::decode(api, &mut b.freeze(), v)
    };
    let mut r = Reader(body.clone());
    let kind = match api {
        // v0 reads offsets the same way as v1 (the storage that differed is gone).
        ApiKey::OffsetFetch => as_codec(&[], 1)?,
        ApiKey::DeleteTopics => as_codec(&[], 1)?,
        // v1 adds validate_only; v2 only changes the answer.
        ApiKey::CreateTopics if version == 0 => as_codec(&[0], 2)?,
        ApiKey::CreateTopics => as_codec(&[], 2)?,
        // v1 adds include_synonyms.
        ApiKey::DescribeConfigs => as_codec(&[0], 1)?,
        ApiKey::Produce => RequestKind::Produce(produce(&mut r)?),
        ApiKey::Fetch => RequestKind::Fetch(fetch(&mut r, version)?),
        ApiKey::ListOffsets => RequestKind::ListOffsets(list_offsets(&mut r)?),
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(offset_commit(&mut r, version)?),
        ApiKey::OffsetForLeaderEpoch => {
            RequestKind::OffsetForLeaderEpoch(offset_for_leader_epoch(&mut r)?)
        }
        ApiKey::DescribeAcls => RequestKind::DescribeAcls(describe_acls(&mut r)?),
        ApiKey::CreateAcls => RequestKind::CreateAcls(create_acls(&mut r)?),
        ApiKey::DeleteAcls => RequestKind::DeleteAcls(delete_acls(&mut r)?),
        _ => anyhow::bail!("{api:?} v{version} is not a legacy version"),
    };
    if matches!(
        api,
        ApiKey::Produce
            | ApiKey::Fetch
            | ApiKey::ListOffsets
            | ApiKey::OffsetCommit
            | ApiKey::OffsetForLeaderEpoch
            | ApiKey::DescribeAcls
            | ApiKey::CreateAcls
            | ApiKey::DeleteAcls
    ) {
        r.end()?;
    }
    Ok(kind)
}

/// Produce v0–2: records stay message sets (magic 0 or 1).
fn produce(r: &mut Reader) -> anyhow::Result<ProduceRequest> {
    let mut out = ProduceRequest::default();
    out.acks = r.i16()?;
    out.timeout_ms = r.i32()?;
    for _ in 0..r.count(6)? {
        let mut t = produce_request::TopicProduceData::default();
        t.name = r.string()?.into();
        for _ in 0..r.count(8)? {
            let mut p = produce_request::PartitionProduceData::default();
            p.index = r.i32()?;
            p.records = r.bytes()?;
            t.partition_data.push(p);
        }
        out.topic_data.push(t);
    }
    Ok(out)
}

/// Fetch v0–3 (v3 adds the response's byte limit).
fn fetch(r: &mut Reader, version: i16) -> anyhow::Result<FetchRequest> {
    let mut out = FetchRequest::default();
    out.replica_id = r.i32()?.into();
    out.max_wait_ms = r.i32()?;
    out.min_bytes = r.i32()?;
    out.max_bytes = if version >= 3 { r.i32()? } else { i32::MAX };
    out.session_epoch = -1;
    for _ in 0..r.count(6)? {
        let mut t = fetch_request::FetchTopic::default();
        t.topic = r.string()?.into();
        for _ in 0..r.count(16)? {
            let mut p = fetch_request::FetchPartition::default();
            p.partition = r.i32()?;
            p.fetch_offset = r.i64()?;
            p.partition_max_bytes = r.i32()?;
            p.current_leader_epoch = -1;
            t.partitions.push(p);
        }
        out.topics.push(t);
    }
    Ok(out)
}

/// ListOffsets v0: a timestamp and a maximum number of offsets per partition (one
/// offset is answered, as Kafka does).
fn list_offsets(r: &mut Reader) -> anyhow::Result<ListOffsetsRequest> {
    let mut out = ListOffsetsRequest::default();
    out.replica_id = r.i32()?.into();
    for _ in 0..r.count(6)? {
        let mut t = list_offsets_request::ListOffsetsTopic::default();
        t.name = r.string()?.into();
        for _ in 0..r.count(16)? {
            let mut p = list_offsets_request::ListOffsetsPartition::default();
            p.partition_index = r.i32()?;
            p.timestamp = r.i64()?;
            let _max_num_offsets = r.i32()?;
            p.current_leader_epoch = -1;
            t.partitions.push(p);
        }
        out.topics.push(t);
    }
    Ok(out)
}

/// OffsetCommit v0 (no group generation: a simple commit) and v1 (a generation, a
/// member, and a commit timestamp per partition, which Shale does not keep).
fn offset_commit(r: &mut Reader, version: i16) -> anyhow::Result<OffsetCommitRequest> {
    let mut out = OffsetCommitRequest::default();
    out.group_id = r.string()?.into();
    out.generation_id_or_member_epoch = -1;
    if version >= 1 {
        out.generation_id_or_member_epoch = r.i32()?;
        out.member_id = r.string()?;
    }
    out.retention_time_ms = -1;
    for _ in 0..r.count(6)? {
        let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
        t.name = r.string()?.into();
        for _ in 0..r.count(14)? {
            let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
            p.partition_index = r.i32()?;
            p.committed_offset = r.i64()?;
            if version >= 1 {
                let _commit_timestamp = r.i64()?;
            }
            p.committed_leader_epoch = -1;
            p.committed_metadata = r.nullable_string()?;
            t.partitions.push(p);
        }
        out.topics.push(t);
    }
    Ok(out)
}

/// OffsetForLeaderEpoch v0–1 (no current leader epoch, no replica id).
fn offset_for_leader_epoch(r: &mut Reader) -> anyhow::Result<OffsetForLeaderEpochRequest> {
    let mut out = OffsetForLeaderEpochRequest::default();
    out.replica_id = (-2).into(); // a consumer's request (Kafka's DEBUGGING_REPLICA_ID)
    for _ in 0..r.count(6)? {
        let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
        t.topic = r.string()?.into();
        for _ in 0..r.count(8)? {
            let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
            p.partition = r.i32()?;
            p.current_leader_epoch = -1;
            p.leader_epoch = r.i32()?;
            t.partitions.push(p);
        }
        out.topics.push(t);
    }
    Ok(out)
}

/// An ACL filter of v0: resource type and name, principal, host, operation,
/// permission; the name matched literally.
type Filter = (
    i8,
    Option<StrBytes>,
    Option<StrBytes>,
    Option<StrBytes>,
    i8,
    i8,
);

fn acl_filter(r: &mut Reader) -> anyhow::Result<Filter> {
    Ok((
        r.i8()?,
        r.nullable_string()?,
        r.nullable_string()?,
        r.nullable_string()?,
        r.i8()?,
        r.i8()?,
    ))
}

fn describe_acls(r: &mut Reader) -> anyhow::Result<DescribeAclsRequest> {
    let (kind, name, principal, host, op, perm) = acl_filter(r)?;
    let mut out = DescribeAclsRequest::default();
    out.resource_type_filter = kind;
    out.resource_name_filter = name;
    out.pattern_type_filter = LITERAL;
    out.principal_filter = principal;
    out.host_filter = host;
    out.operation = op;
    out.permission_type = perm;
    Ok(out)
}

fn create_acls(r: &mut Reader) -> anyhow::Result<CreateAclsRequest> {
    let mut out = CreateAclsRequest::default();
    for _ in 0..r.count(9)? {
        let mut c = create_acls_request::AclCreation::default();
        c.resource_type = r.i8()?;
        c.resource_name = r.string()?;
        c.resource_pattern_type = LITERAL;
        c.principal = r.string()?;
        c.host = r.string()?;
        c.operation = r.i8()?;
        c.permission_type = r.i8()?;
        out.creations.push(c);
    }
    Ok(out)
}

fn delete_acls(r: &mut Reader) -> anyhow::Result<DeleteAclsRequest> {
    let mut out = DeleteAclsRequest::default();
    for _ in 0..r.count(9)? {
        let (kind, name, principal, host, op, perm) = acl_filter(r)?;
        let mut f = delete_acls_request::DeleteAclsFilter::default();
        f.resource_type_filter = kind;
        f.resource_name_filter = name;
        f.pattern_type_filter = LITERAL;
        f.principal_filter = principal;
        f.host_filter = host;
        f.operation = op;
        f.permission_type = perm;
        out.filters.push(f);
    }
    Ok(out)
}

/// A response body being written (the old, non-flexible layouts).
#[derive(Default)]
pub struct Writer(pub BytesMut);

impl Writer {
    pub fn i8(&mut self, v: i8) -> &mut Self {
        self.0.put_i8(v);
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.0.put_i16(v);
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.put_i32(v);
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.0.put_i64(v);
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.0.put_u8(u8::from(v));
        self
    }
    pub fn count(&mut self, n: usize) -> &mut Self {
        self.i32(n as i32)
    }
    /// A string, cut at 32,767 bytes (the longest the old layouts can say).
    pub fn string(&mut self, s: &str) -> &mut Self {
        let mut end = s.len().min(i16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.0.put_i16(end as i16);
        self.0.put_slice(&s.as_bytes()[..end]);
        self
    }
    pub fn nullable_string(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => self.string(s),
            None => self.i16(-1),
        }
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.put_i32(b.len() as i32);
        self.0.put_slice(b);
        self
    }
    /// The whole frame: length, correlation id (response header v0), body.
    pub fn frame(self, correlation_id: i32) -> Bytes {
        let mut out = BytesMut::with_capacity(8 + self.0.len());
        out.put_i32(4 + self.0.len() as i32);
        out.put_i32(correlation_id);
        out.put_slice(&self.0);
        out.freeze()
    }
}
