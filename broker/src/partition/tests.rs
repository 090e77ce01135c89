use super::*;
use shale_records::record::{BatchBuilder, Record};

pub(super) fn batch(n: usize, value_len: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_000);
    for _ in 0..n {
        b.push(Record::new(None, Some(&vec![b'a'; value_len]), 1_000));
    }
    b.build().to_vec()
}

fn shared(dir: &Path, broker: i32) -> Shared {
    Shared {
        data_dir: dir.to_path_buf(),
        broker_id: broker,
        appended: Arc::new(watch::Sender::new(0)),
        files: FileCache::new(16),
    }
}

fn open_replica(dir: &Path, id: Uuid, config: TopicConfig, broker: i32) -> Partition {
    Partition::open(&shared(dir, broker), "t", 0, id, Arc::new(config), 0).unwrap()
}

/// A partition this broker (1) leads alone.
fn open(dir: &Path, id: Uuid, config: TopicConfig) -> Partition {
    let p = open_replica(dir, id, config, 1);
    p.apply_state(&PartitionState::initial(id, 0, vec![1]), 0)
        .unwrap();
    p
}

fn fetch(replica_id: i32, epoch: i32, at: (i64, i32)) -> FollowerFetch {
    FollowerFetch {
        replica_id,
        replica_epoch: 1,
        current_leader_epoch: epoch,
        fetch_offset: at.0,
        last_fetched_epoch: at.1,
        state_version: 0,
        log_start_offset: Some(0),
        max_bytes: 1 << 20,
    }
}

/// One round of the follower's fetch loop against `leader`.
pub(super) fn replicate_once(leader: &Partition, follower: &Partition, follower_id: i32) {
    let pos = follower.follower_position().unwrap();
    let at = (pos.log_end_offset, pos.last_epoch);
    let read = leader
        .serve_replica(&fetch(follower_id, pos.leader_epoch, at), 0)
        .unwrap();
    let applied = match read.diverging {
        Some((e, end)) => follower.truncate_diverged(&pos, e, end).unwrap(),
        None => follower
            .append_from_leader(&pos, &read.records, read.high_watermark, 0)
            .unwrap(),
    };
    assert!(applied);
}

fn state(id: Uuid, leader: i32, epoch: i32, isr: Vec<i32>, version: i64) -> PartitionState {
    PartitionState {
        topic_id: id,
        partition: 0,
        replicas: vec![1, 2],
        leader,
        leader_epoch: epoch,
        isr,
        elr: Vec::new(),
        recovering: Vec::new(),
        adding: Vec::new(),
        removing: Vec::new(),
        version,
    }
}

/// Replicas on brokers 1 (leading, epoch 0) and 2, both in the ISR.
pub(super) fn two_replicas(d1: &Path, d2: &Path, id: Uuid) -> (Partition, Partition) {
    let a = open_replica(d1, id, TopicConfig::default(), 1);
    let b = open_replica(d2, id, TopicConfig::default(), 2);
    let s0 = state(id, 1, 0, vec![1, 2], 0);
    a.apply_state(&s0, 0).unwrap();
    b.apply_state(&s0, 0).unwrap();
    (a, b)
}

#[test]
fn followers_copy_the_leader_and_the_hw_follows_the_isr() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
    // Only the leader takes produce; a follower answers NOT_LEADER_OR_FOLLOWER.
    let err = b.append(&batch(1, 1), None, 0).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::NotLeaderOrFollower);
    let err = a.append(&batch(1, 1), Some(3), 0).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::NotEnoughReplicas);
    assert_eq!(a.offsets().log_end_offset, 0, "refused before writing");
    a.append(&batch(3, 10), Some(2), 0).unwrap();
    a.append(&batch(2, 10), Some(2), 0).unwrap();
    assert_eq!(a.high_watermark(), 0, "the follower has nothing yet");
    // Markers are removed below every replica's log end: none heard from yet.
    assert_eq!((a.replicas_log_end(), b.replicas_log_end()), (-1, i64::MIN));
    replicate_once(&a, &b, 2);
    assert_eq!(b.offsets().log_end_offset, 5);
    assert_eq!(a.high_watermark(), 0, "the leader learns on the next fetch");
    replicate_once(&a, &b, 2);
    assert_eq!((a.high_watermark(), b.high_watermark()), (5, 5));
    assert_eq!(a.replicas_log_end(), 5);
    // A fetch with an old epoch is fenced.
    let err = a.serve_replica(&fetch(2, -1, (5, 0)), 0).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::FencedLeaderEpoch);
}

#[test]
fn a_deposed_leader_truncates_its_divergent_tail() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = Uuid::new_v4();
    let (a, b) = two_replicas(d1.path(), d2.path(), id);
    a.append(&batch(4, 10), None, 0).unwrap();
    replicate_once(&a, &b, 2);
    // Broker 1 writes a tail nobody copies, then loses the lead to broker 2.
    a.append(&batch(3, 99), None, 0).unwrap();
    let s1 = state(id, 2, 1, vec![2], 1);
    a.apply_state(&s1, 0).unwrap();
    b.apply_state(&s1, 0).unwrap();
    b.append(&batch(2, 20), None, 0).unwrap();
    assert_eq!(a.offsets().log_end_offset, 7);
    // First round: diverged at the end of epoch 0 on broker 2 (offset 4).
    replicate_once(&b, &a, 1);
    assert_eq!(a.offsets().log_end_offset, 4);
    replicate_once(&b, &a, 1);
    assert_eq!(a.offsets().log_end_offset, 6);
    let (left, _) = a.read_replica_bytes();
    let (right, _) = b.read_replica_bytes();
    assert_eq!(left, right, "the logs are identical after truncation");
    // The checkpoint survives a restart.
    drop(a);
    let a = open_replica(d1.path(), id, TopicConfig::default(), 1);
    a.apply_state(&s1, 0).unwrap();
    let pos = a.follower_position().unwrap();
    assert_eq!((pos.log_end_offset, pos.last_epoch, pos.leader), (6, 1, 2));
}

/// A new leader's HW can lag what the old leader acknowledged: a follower at that
/// HW but short of the new epoch's start must not join the ISR, or electing it next
/// would lose acknowledged records (KAFKA-7128).
#[test]
fn a_follower_joins_the_isr_only_at_the_start_of_the_leaders_epoch() {
    let id = Uuid::new_v4();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let three = |leader, epoch, isr: Vec<i32>, version| PartitionState {
        replicas: vec![1, 2, 3],
        ..state(id, leader, epoch, isr, version)
    };
    // Broker 2 led epoch 0 and wrote 10 records; broker 1 copied them but learned
    // a high watermark of only 4 before broker 2 died.
    let b1 = open_replica(dirs[0].path(), id, TopicConfig::default(), 1);
    let b3 = open_replica(dirs[1].path(), id, TopicConfig::default(), 3);
    let s0 = three(2, 0, vec![1, 2], 0);
    b1.apply_state(&s0, 0).unwrap();
    let mut records = Vec::new();
    for i in 0..10 {
        let mut b = BytesMut::from(&batch(1, 5)[..]);
        batch::set_base_offset(&mut b, i);
        batch::set_partition_leader_epoch(&mut b, 0);
        records.extend_from_slice(&b);
    }
    let pos = b1.follower_position().unwrap();
    assert!(b1.append_from_leader(&pos, &records, 4, 0).unwrap());
    // Broker 3 holds the first 4 only.
    b3.apply_state(&s0, 0).unwrap();
    let pos = b3.follower_position().unwrap();
    let first4: usize = {
        let mut n = 0;
        for _ in 0..4 {
            n += BatchHeader::parse(&records[n..]).unwrap().total_size();
        }
        n
    };
    assert!(
        b3.append_from_leader(&pos, &records[..first4], 4, 0)
            .unwrap()
    );
    // Broker 1 leads epoch 1 with HW 4 (broker 2, still in the ISR, has not fetched
    // yet); broker 3 asks from offset 4.
    let s1 = three(1, 1, vec![1, 2], 1);
    b1.apply_state(&s1, 0).unwrap();
    assert_eq!(b1.high_watermark(), 4);
    // Until its HW reaches the epoch start (10), the latest offset it could name
    // (4) may be below what broker 2 acknowledged: ListOffsets says "retry".
    let latest = b1.list_offset(-1).unwrap_err();
    assert_eq!(latest.code(), shale_records::ErrorCode::OffsetNotAvailable);
    assert_eq!(
        b1.list_offset(-2).unwrap(),
        Some((0, -1)),
        "earliest still answers"
    );
    let read = b1.serve_replica(&fetch(3, 1, (4, 0)), 0).unwrap();
    assert!(read.isr_change.is_none(), "joined short of the epoch start");
    let read = b1.serve_replica(&fetch(3, 1, (10, 0)), 0).unwrap();
    let (_, isr) = read.isr_change.expect("caught up at the epoch start");
    assert_eq!(isr, vec![1, 2, 3]);
}

/// A replica that led an epoch without writing in it, then follows a leader that
/// never heard of that epoch: it forgets the empty epoch and catches up (it used
/// to be told "diverged" forever, truncating nothing).
#[test]
fn an_empty_epoch_led_by_a_follower_does_not_stall_it() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = Uuid::new_v4();
    let (a, b) = two_replicas(d1.path(), d2.path(), id);
    a.append(&batch(3, 10), None, 0).unwrap();
    replicate_once(&a, &b, 2);
    // b leads epoch 1 and writes nothing; then a leads epoch 2 and writes.
    let s1 = state(id, 2, 1, vec![1, 2], 1);
    a.apply_state(&s1, 0).unwrap();
    b.apply_state(&s1, 0).unwrap();
    let s2 = state(id, 1, 2, vec![1, 2], 2);
    a.apply_state(&s2, 0).unwrap();
    b.apply_state(&s2, 0).unwrap();
    a.append(&batch(2, 10), None, 0).unwrap();
    for _ in 0..3 {
        replicate_once(&a, &b, 2);
    }
    assert_eq!(
        b.offsets().log_end_offset,
        5,
        "the follower never caught up"
    );
}

/// An ISR member whose new incarnation fetches below what the old one had lost
/// records: the leader takes it out of the ISR at once. A stale request of the same
/// incarnation changes nothing.
#[test]
fn a_follower_whose_log_went_backwards_leaves_the_isr() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
    a.append(&batch(5, 10), None, 0).unwrap();
    replicate_once(&a, &b, 2);
    let read = a.serve_replica(&fetch(2, 0, (5, 0)), 0).unwrap();
    assert!(read.isr_change.is_none());
    let read = a.serve_replica(&fetch(2, 0, (2, 0)), 0).unwrap();
    assert!(
        read.isr_change.is_none(),
        "a stale request of the same incarnation"
    );
    let restarted = FollowerFetch {
        replica_epoch: 2,
        ..fetch(2, 0, (2, 0))
    };
    let read = a.serve_replica(&restarted, 0).unwrap();
    let (_, isr) = read.isr_change.expect("removed from the ISR");
    assert_eq!(isr, vec![1]);
}

/// A follower never takes a damaged batch: the leader refuses to serve one from its
/// disk (CORRUPT_MESSAGE), and the follower refuses one that arrives damaged; its log
/// stays as it was, and replication goes on once the leader serves good bytes.
#[test]
fn a_follower_never_replicates_a_damaged_batch() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
    a.append(&batch(3, 10), None, 0).unwrap();
    replicate_once(&a, &b, 2);
    a.append(&batch(3, 10), None, 0).unwrap();
    let pos = b.follower_position().unwrap();
    assert_eq!(pos.log_end_offset, 3);

    // Damaged in transit: the follower's append refuses it.
    let good = a.serve_replica(&fetch(2, 0, (3, 0)), 0).unwrap();
    let mut damaged = good.records.to_vec();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x10;
    let err = b
        .append_from_leader(&pos, &damaged, good.high_watermark, 0)
        .unwrap_err();
    assert_eq!(
        err.code(),
        shale_records::ErrorCode::CorruptMessage,
        "{err}"
    );
    assert_eq!(b.follower_position().unwrap().log_end_offset, 3);

    // Damaged on the leader's disk: serving it is an error naming the segment.
    let segment = a.dir().join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    let err = a.serve_replica(&fetch(2, 0, (3, 0)), 0).unwrap_err();
    assert_eq!(
        err.code(),
        shale_records::ErrorCode::CorruptMessage,
        "{err}"
    );
    assert!(
        err.to_string().contains("00000000000000000000.log"),
        "{err}"
    );
    assert_eq!(b.follower_position().unwrap().log_end_offset, 3);
    // The batches before the damage still replicate to a follower that lacks them.
    let read = a.serve_replica(&fetch(2, 0, (0, -1)), 0).unwrap();
    assert_eq!(validate_batches(&read.records, i64::MAX).unwrap().len(), 1);
}

/// A directory whose metadata cannot be read is kept (the partition does not open),
/// never taken for another topic's and deleted.
#[test]
fn unreadable_partition_metadata_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let id = Uuid::new_v4();
    let p = open(dir.path(), id, TopicConfig::default());
    p.append(&batch(5, 5), None, 0).unwrap();
    let pdir = p.dir();
    drop(p);
    let meta = pdir.join(METADATA_FILE);
    std::fs::remove_file(&meta).unwrap();
    std::fs::create_dir(&meta).unwrap(); // reading it fails with EISDIR
    let opened = Partition::open(
        &shared(dir.path(), 1),
        "t",
        0,
        id,
        Arc::new(TopicConfig::default()),
        0,
    );
    assert!(
        opened.is_err(),
        "opened a partition with unreadable metadata"
    );
    let logs = std::fs::read_dir(&pdir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert_eq!(logs, 1, "the partition's data is gone");
    // Readable again: it opens with its data.
    std::fs::remove_dir(&meta).unwrap();
    write_metadata(&pdir, id).unwrap();
    let p = open(dir.path(), id, TopicConfig::default());
    assert_eq!(p.offsets().log_end_offset, 5);
}

#[test]
fn bad_batches_are_refused_and_leave_the_log_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let config = TopicConfig {
        max_message_bytes: 500,
        ..TopicConfig::default()
    };
    let p = open(dir.path(), Uuid::new_v4(), config);
    p.append(&batch(2, 10), None, 0).unwrap();
    let before = p.offsets();

    let good = batch(1, 10);
    let mut crc = good.clone();
    *crc.last_mut().unwrap() ^= 1;
    let mut magic = good.clone();
    magic[16] = 1;
    let mut two = good.clone();
    two.extend_from_slice(&crc); // one good batch then a bad one: all or nothing
    let cases: Vec<(Vec<u8>, shale_records::ErrorCode)> = vec![
        (Vec::new(), shale_records::ErrorCode::InvalidRecord),
        (
            good[..30].to_vec(),
            shale_records::ErrorCode::CorruptMessage,
        ),
        (
            good[..good.len() - 1].to_vec(),
            shale_records::ErrorCode::CorruptMessage,
        ),
        (crc, shale_records::ErrorCode::CorruptMessage),
        (magic, shale_records::ErrorCode::UnsupportedForMessageFormat),
        (two, shale_records::ErrorCode::CorruptMessage),
        (batch(1, 600), shale_records::ErrorCode::MessageTooLarge),
    ];
    for (bytes, code) in cases {
        let err = p.append(&bytes, None, 0).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
    }
    assert_eq!(p.offsets(), before);
}

#[test]
fn a_read_only_partition_appends_nothing_and_its_active_segment_seals_whatever_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), Uuid::new_v4(), TopicConfig::default());
    // A batch stamped in the future: its segment is "younger" than any age.
    let mut b = BatchBuilder::new(1_000);
    b.push(Record::new(None, Some(b"later"), i64::MAX / 2));
    p.append(&b.build(), None, 0).unwrap();
    let before = p.offsets();
    p.set_config(Arc::new(TopicConfig {
        read_only: true,
        ..TopicConfig::default()
    }));
    let err = p.append(&batch(1, 10), None, 0).unwrap_err();
    assert!(matches!(err, Error::ReadOnly(_)), "{err}");
    assert_eq!(err.code(), shale_records::ErrorCode::InvalidTopicException);
    assert_eq!(p.offsets(), before);
    assert!(p.sealed_segments_after(-1).is_empty());
    assert!(p.roll_if_older(i64::MIN, 0).unwrap(), "sealed at once");
    assert_eq!(p.sealed_segments_after(-1).len(), 1);
}

#[test]
fn log_append_time_stamps_batches_and_keeps_crc_valid() {
    let dir = tempfile::tempdir().unwrap();
    let config = TopicConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..TopicConfig::default()
    };
    let p = open(dir.path(), Uuid::new_v4(), config);
    let a = p.append(&batch(3, 5), None, 77_000).unwrap();
    assert_eq!(a.log_append_time_ms, 77_000);
    let (bytes, _) = p.read(0, 1 << 20, true).unwrap();
    let h = BatchHeader::parse(&bytes).unwrap();
    h.validate(&bytes).unwrap();
    assert!(h.is_log_append_time());
    let recs = shale_records::record::decode_records(&bytes).unwrap();
    assert!(recs.iter().all(|r| r.timestamp == 77_000));
}

/// A client that sends -1 as the batch's max timestamp (older Go clients do): the
/// broker stores the records' largest time there, with a valid CRC, as Kafka does.
#[test]
fn a_missing_max_timestamp_is_computed_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), Uuid::new_v4(), TopicConfig::default());
    let mut b = BatchBuilder::new(1_000);
    for ts in [5_000, 9_000, 7_000] {
        b.push(Record::new(None, Some(b"v"), ts));
    }
    let mut sent = b.build().to_vec();
    batch::set_max_timestamp(&mut sent, -1);
    BatchHeader::parse(&sent).unwrap().validate(&sent).unwrap();
    p.append(&sent, None, 1).unwrap();
    let (bytes, _) = p.read(0, 1 << 20, true).unwrap();
    let h = BatchHeader::parse(&bytes).unwrap();
    h.validate(&bytes).unwrap();
    assert_eq!(h.max_timestamp, 9_000);
}

#[test]
fn directory_of_an_older_topic_with_the_same_name_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let old = open(dir.path(), Uuid::new_v4(), TopicConfig::default());
    old.append(&batch(5, 5), None, 0).unwrap();
    drop(old);
    let new = open(dir.path(), Uuid::new_v4(), TopicConfig::default());
    assert_eq!(new.offsets().log_end_offset, 0);
}

#[test]
fn a_topic_compression_type_stores_every_batch_in_that_codec() {
    use shale_records::batch::{BatchIter, Compression};
    let dir = tempfile::tempdir().unwrap();
    let mut config = TopicConfig::default();
    config.set("compression.type", "zstd").unwrap();
    let p = open(dir.path(), Uuid::new_v4(), config);
    let plain = batch(50, 200);
    let mut lz4 = BatchBuilder::new(1_000).with_compression(Compression::Lz4);
    for i in 0..10 {
        lz4.push(Record::new(
            None,
            Some(format!("lz4-{i}").as_bytes()),
            1_000,
        ));
    }
    let lz4 = lz4.build().to_vec();
    let mut both = plain.clone();
    both.extend_from_slice(&lz4);
    let a = p.append(&both, None, 0).unwrap();
    assert_eq!((a.base_offset, a.last_offset), (0, 59));
    let (stored, _) = p.read(0, 1 << 20, true).unwrap();
    let mut values = Vec::new();
    for item in BatchIter::new(&stored) {
        let (h, range) = item.unwrap();
        h.validate(&stored[range.clone()]).unwrap();
        assert_eq!(h.compression().unwrap(), Compression::Zstd);
        for r in shale_records::record::decode_records(&stored.slice(range)).unwrap() {
            values.push(r.value.unwrap());
        }
    }
    assert_eq!(values.len(), 60);
    assert_eq!(&values[0][..], &[b'a'; 200][..]);
    assert_eq!(&values[59][..], b"lz4-9");
    assert!(stored.len() < plain.len(), "50 repeated values compress");
}

/// A replica removed by a reassignment deletes its copy and, added back while its
/// broker runs on (same incarnation), starts empty: the leader must not take its old
/// position for its log, or it would join the ISR holding nothing.
#[test]
fn a_replica_added_back_empty_does_not_join_the_isr_on_its_old_position() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = Uuid::new_v4();
    let (a, b) = two_replicas(d1.path(), d2.path(), id);
    a.append(&batch(5, 10), None, 0).unwrap();
    replicate_once(&a, &b, 2);
    replicate_once(&a, &b, 2);
    assert_eq!(a.high_watermark(), 5);
    // The leader next sees broker 2 as an adding replica outside the ISR (it never
    // saw the state that removed it); broker 2's copy is gone meanwhile.
    let readded = PartitionState {
        adding: vec![2],
        ..state(id, 1, 0, vec![1], 3)
    };
    a.apply_state(&readded, 0).unwrap();
    let read = a.serve_replica(&fetch(2, 0, (0, -1)), 0).unwrap();
    assert!(
        read.isr_change.is_none(),
        "joined the ISR with an empty log"
    );
    // Even a fetch that claims a position and then falls back is taken as it is.
    let read = a.serve_replica(&fetch(2, 0, (3, 0)), 0).unwrap();
    assert!(read.isr_change.is_none());
    let read = a.serve_replica(&fetch(2, 0, (0, -1)), 0).unwrap();
    assert!(read.isr_change.is_none(), "the old position came back");
    // Once it really holds the log, it joins.
    let read = a.serve_replica(&fetch(2, 0, (5, 0)), 0).unwrap();
    assert!(read.isr_change.is_some_and(|(_, isr)| isr == vec![1, 2]));
}

#[test]
fn a_follower_serves_consumers_up_to_the_high_watermark_it_knows() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
    a.append(&batch(5, 10), Some(2), 0).unwrap();
    replicate_once(&a, &b, 2);
    let read = |p: &Partition, offset: i64, any_replica: bool| {
        let (plan, offsets) = p.plan_fetch(offset, any_replica, None, false)?;
        let bytes = plan.expect("local").read(1 << 20, true)?;
        Ok::<_, Error>((bytes.len(), offsets.high_watermark))
    };
    // Only a fetch that may read from any replica (Kafka v11+) is answered here.
    let err = read(&b, 0, false).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::NotLeaderOrFollower);
    // The follower holds the 5 records but knows of no high watermark yet.
    assert_eq!(b.offsets().log_end_offset, 5);
    assert_eq!(read(&b, 0, true).unwrap(), (0, 0));
    replicate_once(&a, &b, 2);
    let (bytes, hw) = read(&b, 0, true).unwrap();
    assert!(bytes > 50 && hw == 5, "{bytes} bytes, hw {hw}");
    assert_eq!(read(&b, 5, true).unwrap(), (0, 5));
    // Past its log end: out of range (a consumer goes back to the leader).
    let err = read(&b, 6, true).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::OffsetOutOfRange);
}

#[test]
fn a_leader_sends_consumers_only_to_followers_holding_their_offset() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
    a.append(&batch(5, 10), Some(2), 0).unwrap();
    replicate_once(&a, &b, 2);
    replicate_once(&a, &b, 2);
    assert_eq!(a.high_watermark(), 5);
    // Follower 2 said its log starts at 0 and ends at 5.
    assert_eq!(a.followers_holding(0), vec![2]);
    assert_eq!(a.followers_holding(5), vec![2]);
    // Past the high watermark the leader answers (out of range) itself.
    assert!(a.followers_holding(6).is_empty());
    // A follower whose log starts later does not hold the offsets before.
    let later = FollowerFetch {
        log_start_offset: Some(3),
        ..fetch(2, 0, (5, 0))
    };
    a.serve_replica(&later, 0).unwrap();
    assert!(a.followers_holding(2).is_empty());
    assert_eq!(a.followers_holding(3), vec![2]);
    // One that did not say (an older broker) holds nothing as far as this goes.
    let unsaid = FollowerFetch {
        log_start_offset: None,
        ..fetch(2, 0, (5, 0))
    };
    a.serve_replica(&unsaid, 0).unwrap();
    assert!(a.followers_holding(3).is_empty());
    // Only a leader sends consumers anywhere.
    assert!(b.followers_holding(0).is_empty());
}
