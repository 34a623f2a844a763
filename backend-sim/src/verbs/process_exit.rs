//! What the kernel frees when a process exits or crashes: the verbs objects it made through
//! its device files (uverbs' `uverbs_destroy_ufile_hw` on the file's close). The ids went with
//! its rdma_cm files (`close_files_of`), and an id's QP and the CQs made for it with the id; what
//! is left are the objects made explicitly: external QPs, SRQs, address handles, CQs,
//! completion channels, regions and PDs. They go in that order (users before what they use). The
//! simulator lets processes share handles, which the kernel's per-process contexts do not: an
//! object another process still uses (a CQ its QP completes into, a region its posted work
//! names) is left to that process.

use super::ObjKey;
use crate::world::World;

impl World {
    /// Records that the calling process (if any) made verbs object `key`: its exit frees it.
    pub(crate) fn own_verbs_object(&mut self, key: ObjKey) {
        if let Some(group) = self.caller_group() {
            self.verbs.owned.entry(group).or_default().push(key);
        }
    }

    /// Frees the verbs objects process group `group` made and did not destroy, as the kernel
    /// does when the process's device files close.
    pub(crate) fn close_verbs_of(&mut self, group: usize) {
        let Some(keys) = self.verbs.owned.remove(&group) else {
            return;
        };
        for &key in &keys {
            if self.verbs.qps.get(&key).is_some_and(|qp| qp.id.is_none()) {
                self.drop_external_qp(key);
            }
        }
        for &key in &keys {
            if self.verbs.srqs.get(&key).is_some_and(|s| s.id.is_none()) {
                // EBUSY while another process's QP takes its receives: it stays.
                let _ = self.remove_srq(cmtwin::Call::DestroySrq, key);
            }
        }
        for &key in &keys {
            self.remove_ah(key);
        }
        for &key in &keys {
            if self
                .verbs
                .cqs
                .get(&key)
                .is_some_and(|cq| cq.users == 0 && !cq.implicit)
            {
                self.remove_cq(key);
            }
        }
        for &key in &keys {
            if self.verbs.mrs.get(&key).is_some_and(|mr| mr.busy == 0) {
                self.remove_mr(key);
            }
        }
        for &key in &keys {
            if self.verbs.channels.get(&key).is_some_and(|c| c.cqs == 0) {
                self.remove_comp_channel(key);
            }
        }
        for &key in &keys {
            if self.verbs.pds.get(&key).is_some_and(|pd| pd.users == 0) {
                self.verbs.pds.remove(&key);
            }
        }
    }
}
