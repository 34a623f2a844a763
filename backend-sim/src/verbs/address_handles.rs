//! Address handles: `ibv_create_ah`, `ibv_create_ah_from_wc` and `ibv_destroy_ah`, and what a
//! UD send learns from its handle (where the datagram goes). An address handle keeps its
//! attributes only: the destination is looked up when a datagram is sent, so a handle to an
//! address that leads nowhere is taken, and its datagrams are lost, as on hardware. A handle
//! without a global route is refused on RoCE, as the kernel refuses it; on InfiniBand it goes
//! by its LID.

use cmtwin::verbs::{WcOpcode, WcStatus, WorkCompletion, GRH_LEN};
use cmtwin::{AhAttr, AhHandle, Call, CmError, Errno, GlobalRoute, PdHandle, Result, Transport};

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
        let dev = self.verbs.pds[&pd_key].dev;
        if !attr.is_global && self.topo.devices[dev].transport == Transport::Roce {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "a RoCE address handle needs a global route (is_global)",
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
        self.own_verbs_object(key);
        Ok(AhHandle::from_raw(self.stamp(key)))
    }

    /// `ibv_create_ah_from_wc`: an address handle to the sender of receive `wc`: its LID,
    /// and the source of the route header `grh` when the receive has one.
    pub(crate) fn create_ah_from_wc(
        &mut self,
        host: HostKey,
        pd: PdHandle,
        wc: &WorkCompletion,
        grh: &[u8; GRH_LEN as usize],
    ) -> Result<AhHandle> {
        let call = Call::CreateAhFromWc;
        let refuse = |why: &str| Err(CmError::new(call, Errno::EINVAL, why));
        if wc.status != WcStatus::SUCCESS || wc.opcode != WcOpcode::Recv {
            return refuse("not a successful receive");
        }
        // The PD before the header, as cmtwin-verbs checks it before libibverbs parses.
        self.pd_key(host, call, pd)?;
        let mut attr = AhAttr {
            dlid: wc.slid,
            sl: wc.sl,
            src_path_bits: wc.dlid_path_bits,
            port_num: 1,
            ..AhAttr::default()
        };
        if wc.grh {
            let Some(source) = source_gid(grh) else {
                return refuse("the header is neither an IB GRH nor an IPv4 header");
            };
            attr.is_global = true;
            attr.grh = GlobalRoute {
                dgid: source,
                hop_limit: 64,
                ..GlobalRoute::default()
            };
        }
        self.create_ah(host, pd, &attr)
            .map_err(|e| CmError::new(call, e.errno, e.detail))
    }

    /// `ibv_destroy_ah`.
    pub(crate) fn destroy_ah(&mut self, host: HostKey, h: AhHandle) -> Result<()> {
        let key = self.ah_key(host, Call::DestroyAh, h)?;
        self.remove_ah(key);
        Ok(())
    }

    /// Forgets address handle `key`, if it exists.
    pub(crate) fn remove_ah(&mut self, key: ObjKey) {
        if let Some(ah) = self.verbs.ahs.remove(&key) {
            if let Some(pd) = self.verbs.pds.get_mut(&ah.pd) {
                pd.users -= 1;
            }
        }
    }
}

/// The source GID a route header names: rxe's IPv4 header (20 zero bytes, then the header,
/// whose source address is an IPv4-mapped GID) or an InfiniBand GRH (version 6).
fn source_gid(grh: &[u8; GRH_LEN as usize]) -> Option<[u8; 16]> {
    if grh[..20].iter().all(|&b| b == 0) && grh[20] >> 4 == 4 {
        let ip = std::net::Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]);
        return Some(ip.to_ipv6_mapped().octets());
    }
    (grh[0] >> 4 == 6).then(|| grh[8..24].try_into().expect("16 bytes"))
}
