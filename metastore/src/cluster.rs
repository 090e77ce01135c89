//! Cluster state: broker leases, the controller lease, and each partition's replica
//! set, leader, leader epoch and ISR.

use uuid::Uuid;

/// A broker's registration: where to reach it, which incarnation it is, and how long
/// its lease has left. Lease times come from the metastore's clock, so no two brokers'
/// clocks are ever compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerLease {
    pub broker_id: i32,
    /// `host:port` other brokers replicate from (its inter-broker listener).
    pub address: String,
    /// Its address on each of its listeners, by listener name.
    pub endpoints: Vec<(String, String)>,
    /// Raised by every (re)start of the broker ([`crate::Metastore::register_broker`]).
    pub broker_epoch: i64,
    /// When the lease ends, on the metastore's clock (ms since the Unix epoch).
    pub lease_expires_ms: i64,
    pub registered_at_ms: i64,
    /// Lease time left when the row was read (<= 0: expired), by the metastore's clock.
    pub remaining_ms: i64,
    /// When the row was read, on this process's monotonic clock.
    pub read_at: std::time::Instant,
    /// How long ago its lease (any incarnation's) had expired when the row was read (0:
    /// not expired).
    pub expired_for_ms: i64,
    /// Being decommissioned: its replicas move to other brokers, and new partitions
    /// are not placed on it.
    pub decommissioned: bool,
    /// The rack it runs in (`[broker] rack`), if it said.
    pub rack: Option<String>,
}

impl BrokerLease {
    /// Whether the lease is still running: its remaining time when read, less the time
    /// since (a lease read as valid counts down on this process's clock).
    pub fn is_alive(&self) -> bool {
        self.remaining_ms > 0 && (self.read_at.elapsed().as_millis() as i64) < self.remaining_ms
    }

    /// Its address on listener `name` (a broker registered before listeners had
    /// names has only its gRPC address, under `grpc`).
    pub fn endpoint(&self, name: &str) -> Option<&str> {
        if self.endpoints.is_empty() && name == "grpc" {
            return Some(&self.address);
        }
        self.endpoints
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.as_str())
    }

    /// How long it has been dead: since its lease expired (0 while it is alive).
    pub fn dead_for_ms(&self) -> i64 {
        if self.is_alive() {
            return 0;
        }
        self.expired_for_ms + self.read_at.elapsed().as_millis() as i64
    }

    /// Milliseconds left on the lease now (<= 0: expired).
    pub fn remaining_now_ms(&self) -> i64 {
        self.remaining_ms - self.read_at.elapsed().as_millis() as i64
    }
}

/// Who holds the controller lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerLease {
    pub broker_id: i32,
    /// Raised each time the lease changes hands.
    pub epoch: i64,
    /// On the metastore's clock.
    pub lease_expires_ms: i64,
    /// Lease time left when read (<= 0: expired).
    pub remaining_ms: i64,
}

/// Leader, epoch and ISR of one partition. `version` is raised by every change; a
/// change names the version it read (compare-and-set), so a stale writer fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub topic_id: Uuid,
    pub partition: i32,
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// -1: no leader (no eligible replica is alive).
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    /// Eligible leader replicas (KIP-966): brokers removed from the ISR because they
    /// died while the ISR was below `min.insync.replicas`. No `acks=all` record can
    /// have been committed without them since, so they may lead when no ISR member
    /// can. Cleared once the ISR is back at `min.insync.replicas`.
    pub elr: Vec<i32>,
    /// Members that left the ISR or ELR at an unclean restart, with the log each came
    /// back with. Consulted only once the ISR and ELR are empty; cleared by the next
    /// election.
    pub recovering: Vec<Recovering>,
    /// A reassignment in flight (KIP-455): the replicas joining. `replicas` is then
    /// the target replicas followed by the original ones that leave; the controller
    /// finishes it once every adding replica is in the ISR. Empty: none in flight.
    pub adding: Vec<i32>,
    /// The original replicas that leave when the reassignment in flight finishes.
    pub removing: Vec<i32>,
    pub version: i64,
}

impl PartitionState {
    /// Whether a reassignment is in flight.
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }
}

/// A replica that left the ISR or ELR when it restarted after an unclean stop, and the
/// log it came back with (it may have lost an unflushed tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Recovering {
    pub broker: i32,
    /// The leader epoch of its last batch (-1: an empty log).
    pub last_epoch: i32,
    pub log_end: i64,
}

impl PartitionState {
    /// The state of a new partition: the first replica leads at epoch 0, all in sync.
    pub fn initial(topic_id: Uuid, partition: i32, replicas: Vec<i32>) -> Self {
        Self {
            topic_id,
            partition,
            leader: replicas.first().copied().unwrap_or(-1),
            leader_epoch: 0,
            isr: replicas.clone(),
            elr: Vec::new(),
            recovering: Vec::new(),
            adding: Vec::new(),
            removing: Vec::new(),
            replicas,
            version: 0,
        }
    }
}

/// What a partition-state change requires besides its version, checked under locks of
/// the brokers' lease rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateGuard {
    /// This broker's lease must have ended (the leader being replaced).
    pub expired: Option<i32>,
    /// This broker must hold a running lease in this incarnation (broker epoch): the
    /// leader being elected, as the controller saw it.
    pub alive: Option<(i32, i64)>,
}

pub(crate) fn encode_ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

pub(crate) fn encode_recovering(list: &[Recovering]) -> String {
    list.iter()
        .map(|r| format!("{}:{}:{}", r.broker, r.last_epoch, r.log_end))
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn decode_recovering(text: &str) -> crate::Result<Vec<Recovering>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let corrupt = || crate::Error::CorruptRow(format!("recovering replica list '{text}'"));
    text.split(',')
        .map(|item| {
            let mut parts = item.split(':');
            let mut next = || parts.next().ok_or_else(corrupt);
            let broker = next()?.parse().map_err(|_| corrupt())?;
            let last_epoch = next()?.parse().map_err(|_| corrupt())?;
            let log_end = next()?.parse().map_err(|_| corrupt())?;
            Ok(Recovering {
                broker,
                last_epoch,
                log_end,
            })
        })
        .collect()
}

pub(crate) fn decode_ids(text: &str) -> crate::Result<Vec<i32>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|s| {
            s.parse()
                .map_err(|_| crate::Error::CorruptRow(format!("broker id list '{text}'")))
        })
        .collect()
}

/// `name=host:port,…`, as the `endpoints` column holds them (names and addresses
/// contain neither `=` nor `,`).
pub(crate) fn encode_endpoints(endpoints: &[(String, String)]) -> String {
    endpoints
        .iter()
        .map(|(name, address)| format!("{name}={address}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn decode_endpoints(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|e| {
            let (name, address) = e.split_once('=')?;
            Some((name.to_string(), address.to_string()))
        })
        .collect()
}
