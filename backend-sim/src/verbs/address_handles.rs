//! Address handles: `ibv_create_ah` and `ibv_destroy_ah`, and what a UD send learns from its
//! handle (where the datagram goes). An address handle keeps its attributes only: the
//! destination is looked up when a datagram is sent, so a handle to an address that leads
//! nowhere is taken, and its datagrams are lost, as on hardware.

use cmtwin::{AhAttr, AhHandle, Call, CmError, Errno, PdHandle, Result};

use super::{Ah, ObjKey};
use crate::world::{HostKey, World};

/// The ports a simulated device has (1).
const PORTS: u8 = 1;

impl World {
    /// The live address handle behind `h`.
    pub(crate) fn ah_key(&self, host: HostKey, call: Call, h: AhHandle) -> Result<ObjKey> {
        self.unstamp(h.raw())
            .filter(|k| self.verbs.ahs.get(k).is_some_and(|a| a.host == host))
            .ok_or_else(|| {
                CmError::new(
                    call,
                    Errno::EBADF,
                    format!("{h} is not a live address handle of this host"),
                )
            })
    }

    /// `ibv_create_ah`.
    pub(crate) fn create_ah(
        &mut self,
        host: HostKey,
        pd: PdHandle,
        attr: &AhAttr,
    ) -> Result<AhHandle> {
        let call = Call::CreateAh;
        let pd_key = self.pd_key(host, call, pd)?;
        if attr.port_num > PORTS {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("port {} (the device has {PORTS})", attr.port_num),
            ));
        }
        let key = self.verbs.fresh();
        let ah = Ah {
            host,
            pd: pd_key,
            attr: *attr,
        };
        self.verbs.ahs.insert(key, ah);
        self.verbs.pds.get_mut(&pd_key).expect("live PD").users += 1;
        Ok(AhHandle::from_raw(self.stamp(key)))
    }

    /// `ibv_destroy_ah`.
    pub(crate) fn destroy_ah(&mut self, host: HostKey, h: AhHandle) -> Result<()> {
        let key = self.ah_key(host, Call::DestroyAh, h)?;
        let ah = self.verbs.ahs.remove(&key).expect("checked");
        if let Some(pd) = self.verbs.pds.get_mut(&ah.pd) {
            pd.users -= 1;
        }
        Ok(())
    }
}
