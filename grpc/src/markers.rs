//! gRPC transport of transaction markers: the leader's side of `WriteTxnMarkers`,
//! and the coordinator's calls to it.

use shale_broker::replication::{MarkerResult, TxnMarkers};
use shale_proto::v1::*;
use shale_records::ErrorCode;

use super::replication::topic_id;

pub(crate) fn decode_request(r: WriteTxnMarkersRequest) -> TxnMarkers {
    TxnMarkers {
        producer_id: r.producer_id,
        // An epoch out of range matches no producer: the partitions refuse it.
        producer_epoch: i16::try_from(r.producer_epoch).unwrap_or(-1),
        commit: r.commit,
        coordinator_epoch: r.coordinator_epoch,
        partitions: (r.partitions.into_iter())
            .map(|p| (topic_id(&p.topic_id), p.partition))
            .collect(),
    }
}

pub(crate) fn encode_request(m: TxnMarkers) -> WriteTxnMarkersRequest {
    WriteTxnMarkersRequest {
        producer_id: m.producer_id,
        producer_epoch: i32::from(m.producer_epoch),
        commit: m.commit,
        coordinator_epoch: m.coordinator_epoch,
        partitions: (m.partitions.into_iter())
            .map(|(t, p)| TxnMarkerPartition {
                topic_id: t.to_string(),
                partition: p,
            })
            .collect(),
    }
}

pub(crate) fn encode_response(results: Vec<MarkerResult>) -> WriteTxnMarkersResponse {
    WriteTxnMarkersResponse {
        results: (results.into_iter())
            .map(|r| TxnMarkerResult {
                topic_id: r.topic_id.to_string(),
                partition: r.partition,
                error_code: r.error_code as i32,
                error_message: r.error_message,
            })
            .collect(),
    }
}

pub(crate) fn decode_response(r: WriteTxnMarkersResponse) -> Vec<MarkerResult> {
    (r.results.into_iter())
        .map(|r| MarkerResult {
            topic_id: topic_id(&r.topic_id),
            partition: r.partition,
            error_code: ErrorCode::try_from(r.error_code).unwrap_or(ErrorCode::UnknownServerError),
            error_message: r.error_message,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip() {
        let m = TxnMarkers {
            producer_id: 9,
            producer_epoch: 3,
            commit: true,
            coordinator_epoch: 12,
            partitions: vec![(uuid::Uuid::from_u128(5), 2)],
        };
        let back = decode_request(encode_request(m.clone()));
        assert_eq!(
            (
                back.producer_id,
                back.producer_epoch,
                back.commit,
                back.coordinator_epoch
            ),
            (9, 3, true, 12)
        );
        assert_eq!(back.partitions, m.partitions);
        let r = decode_response(encode_response(vec![MarkerResult {
            topic_id: uuid::Uuid::from_u128(5),
            partition: 2,
            error_code: ErrorCode::NotLeaderOrFollower,
            error_message: "moved".into(),
        }]));
        assert_eq!(r[0].error_code, ErrorCode::NotLeaderOrFollower);
        // A producer epoch that no i16 holds is refused by the partitions.
        let mut wide = encode_request(m);
        wide.producer_epoch = 70_000;
        assert_eq!(decode_request(wide).producer_epoch, -1);
    }
}
