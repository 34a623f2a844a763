//! The data path's invariants, checked with the world's (`invariants.rs`): the indexes of QPs
//! agree with their ids, and every count that guards a destroy (a region's busy count, the
//! users of a PD (regions, QPs and address handles), of a CQ or of a completion channel)
//! equals what actually refers to the object.

use super::ObjKey;
use crate::store::KeyMap;
use crate::world::World;

impl World {
    /// Panics, naming the invariant, if the verbs objects are inconsistent; returns how many
    /// items it walked.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(crate) fn check_verbs_invariants(&self) -> usize {
        let v = &self.verbs;
        let mut walked = v.qps.len() + v.mrs.len() + v.ahs.len() + v.pds.len();
        walked += v.cqs.len() + v.channels.len();
        // Counts are only looked up, never walked: hash maps (ordered ones were most of the
        // cost of checking a small world after every call).
        let mut pd_users: KeyMap<ObjKey, u32> = KeyMap::default();
        let mut cq_users: KeyMap<ObjKey, u32> = KeyMap::default();
        let mut busy: KeyMap<ObjKey, u32> = KeyMap::default();
        for &pd in v.default_pd.values() {
            *pd_users.entry(pd).or_default() += 1;
        }
        for (key, qp) in v.qps.iter_unordered() {
            if let Some(owner) = qp.id {
                let id = self
                    .kernel
                    .ids
                    .get(&owner)
                    .unwrap_or_else(|| panic!("QP {key} belongs to dead id {owner}"));
                assert_eq!(
                    id.qp(),
                    Some(qp.qpn),
                    "QP {key}'s id names another QP number"
                );
                assert_eq!(self.qp_of(owner), Some(*key), "QP {key} by id");
            }
            let by_num = v.qp_by_num.get(&(qp.host, qp.qpn));
            assert_eq!(by_num, Some(key), "QP {key} by number");
            *pd_users.entry(qp.pd).or_default() += 1;
            *cq_users.entry(qp.send_cq).or_default() += 1;
            *cq_users.entry(qp.recv_cq).or_default() += 1;
            let posted = qp.machine.posted_sges();
            walked += posted.len();
            for s in &posted {
                if let Some(&mr) = v.mr_by_key.get(&(qp.dev, s.lkey)) {
                    *busy.entry(mr).or_default() += 1;
                }
            }
        }
        let on_ids = v
            .qps
            .iter_unordered()
            .filter(|(_, q)| q.id.is_some())
            .count();
        let ids_with_qp = self
            .kernel
            .ids
            .iter_unordered()
            .filter(|(_, id)| id.qp().is_some())
            .count();
        assert_eq!(ids_with_qp, on_ids, "ids with a QP against QPs on ids");
        walked += self.check_srq_invariants(&mut pd_users, &mut busy);
        for (key, mr) in v.mrs.iter_unordered() {
            *pd_users.entry(mr.pd).or_default() += 1;
            assert_eq!(
                mr.busy,
                busy.get(key).copied().unwrap_or(0),
                "region {key}'s busy count"
            );
            assert_eq!(
                v.mr_by_key.get(&(mr.dev, mr.key)),
                Some(key),
                "region {key} by key"
            );
        }
        for ah in v.ahs.iter_unordered().map(|(_, ah)| ah) {
            *pd_users.entry(ah.pd).or_default() += 1;
        }

        for (key, pd) in v.pds.iter_unordered() {
            let users = pd_users.get(key).copied().unwrap_or(0);
            assert_eq!(pd.users, users, "PD {key}'s users");
        }
        let mut channel_cqs: KeyMap<ObjKey, u32> = KeyMap::default();
        for (key, cq) in v.cqs.iter_unordered() {
            let users = cq_users.get(key).copied().unwrap_or(0);
            assert_eq!(cq.users, users, "CQ {key}'s users");
            if let Some(c) = cq.channel {
                *channel_cqs.entry(c).or_default() += 1;
            }
        }
        for (key, channel) in v.channels.iter_unordered() {
            let cqs = channel_cqs.get(key).copied().unwrap_or(0);
            assert_eq!(channel.cqs, cqs, "completion channel {key}'s CQs");
        }
        walked
    }

    /// The SRQs' part: each counts as a user of its PD, its receives' entries keep their
    /// regions busy, and its count of QPs is the QPs attached to it. How many items it
    /// walked.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    fn check_srq_invariants(
        &self,
        pd_users: &mut KeyMap<ObjKey, u32>,
        busy: &mut KeyMap<ObjKey, u32>,
    ) -> usize {
        let v = &self.verbs;
        let mut walked = v.srqs.len();
        let mut srq_users: KeyMap<ObjKey, u32> = KeyMap::default();
        for (q, s) in &v.srq_of_qp {
            assert!(v.qps.contains_key(q), "SRQ {s} has dead QP {q}");
            *srq_users.entry(*s).or_default() += 1;
        }
        for (key, srq) in v.srqs.iter_unordered() {
            *pd_users.entry(srq.pd).or_default() += 1;
            let users = srq_users.get(key).copied().unwrap_or(0);
            assert_eq!(srq.users, users, "SRQ {key}'s QPs");
            for s in srq.rq.iter().flat_map(|r| r.sges.iter()) {
                walked += 1;
                if let Some(&mr) = v.mr_by_key.get(&(srq.dev, s.lkey)) {
                    *busy.entry(mr).or_default() += 1;
                }
            }
            if let Some(id) = srq.id {
                assert_eq!(v.srq_of_id.get(&id), Some(key), "SRQ {key} by id");
            }
        }
        walked
    }
}
