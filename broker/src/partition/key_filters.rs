//! A sealed segment's key filter (`.keys`): read, or built and installed.

use std::path::Path;

use shale_log::SealedSegmentInfo;
use shale_records::keyfilter::KeyFilter;

use super::Partition;
use crate::error::{Error, Result};

impl Partition {
    /// A sealed segment's key filter: the one beside it if it matches, else built from
    /// the file and installed if the segment is unchanged meanwhile (`true`: installed).
    /// Blocking.
    pub(crate) fn key_filter(&self, seg: &SealedSegmentInfo) -> std::io::Result<(KeyFilter, bool)> {
        if let Some(f) = shale_log::read_key_filter(seg) {
            return Ok((f, false));
        }
        let f = shale_log::build_key_filter(seg)?;
        let tmp = shale_log::write_key_filter_tmp(seg, &f)?;
        let installed = self
            .install_key_filter(seg, &tmp)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok((f, installed))
    }

    /// Installs a key filter written to `tmp` if `seg` is unchanged (see
    /// `PartitionLog::install_key_filter`).
    pub fn install_key_filter(&self, seg: &SealedSegmentInfo, tmp: &Path) -> Result<bool> {
        self.replica()
            .log
            .install_key_filter(seg, tmp)
            .map_err(Error::Storage)
    }
}
