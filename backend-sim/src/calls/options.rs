//! `rdma_set_option` (§2.4, §4.5). Produces ROUTE_RESOLVED for the IB_PATH option.

use cmtwin::{
    Call, CmError, CmOption, Errno, EventKind, EventParam, IdHandle, Result, IB_PATH_PRIMARY_FLAGS,
    IB_PATH_RECORD_LEN,
};

use crate::world::{CmState, HostKey, World};

impl World {
    /// `rdma_set_option`.
    pub(crate) fn set_option(
        &mut self,
        host: HostKey,
        h: IdHandle,
        option: &CmOption,
    ) -> Result<()> {
        let call = Call::SetOption;
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let state = self.id(key).state;
        let invalid = |why: &str| {
            Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{option:?}: {why} (state {state:?})"),
            ))
        };
        match option {
            CmOption::Tos(t) => self.id_mut(key).tos = *t,
            CmOption::ReuseAddr(on) => {
                if !((*on && state != CmState::Listen) || state == CmState::Idle) {
                    return invalid("not allowed in this state");
                }
                self.id_mut(key).reuseaddr = *on;
            }
            CmOption::AfOnly(on) => {
                if !matches!(state, CmState::Idle | CmState::AddrBound) {
                    return invalid("only before listening or connecting");
                }
                self.id_mut(key).afonly = Some(*on);
            }
            CmOption::AckTimeout(t) => {
                if !self.id(key).qp_type.is_connected() {
                    return invalid("only for RC ids");
                }
                self.id_mut(key).ack_timeout = Some(*t);
            }
            CmOption::IbPath(records) => {
                if records.is_empty() || records.len() % IB_PATH_RECORD_LEN != 0 {
                    return invalid("not a whole number of path records");
                }
                if !records.chunks(IB_PATH_RECORD_LEN).any(is_primary_gmp_path) {
                    return invalid(
                        "no record flagged GMP | PRIMARY | BIDIRECTIONAL (ucma_set_ib_path)",
                    );
                }
                if self.id(key).device.is_none() || state != CmState::AddrResolved {
                    return invalid("needs a resolved address");
                }
                self.id_mut(key).state = CmState::RouteResolved;
                self.id_mut(key).path_plt = Some(self.cfg.packet_life_time);
                self.queue_event(
                    key,
                    EventKind::RouteResolved,
                    0,
                    EventParam::None,
                    Vec::new(),
                );
            }
            // An option added to `CmOption` later that this simulator does not know: the
            // kernel's answer to an unknown option name.
            other => {
                return Err(CmError::new(
                    call,
                    Errno::ENOSYS,
                    format!("{other:?} is not modelled"),
                ))
            }
        }
        Ok(())
    }
}

/// Whether a `struct ib_path_rec_data` record is the one the kernel installs: its `flags`
/// (the first 4 bytes, in the host's byte order) exactly GMP | PRIMARY | BIDIRECTIONAL.
fn is_primary_gmp_path(record: &[u8]) -> bool {
    record
        .first_chunk::<4>()
        .is_some_and(|flags| u32::from_ne_bytes(*flags) == IB_PATH_PRIMARY_FLAGS)
}
