//! The unsafe half of device queries: `rdma_get_devices` (the list freed by
//! `rdma_free_devices` when its wrapper drops), `ibv_query_device`, `ibv_query_port`,
//! `ibv_get_device_name`, `ibv_get_device_guid`, and an id's `verbs`/`port_num`.
//!
//! The contexts of the list are librdmacm's own (`ucma_init` opened them and keeps them open
//! while the process lives or, for a removed device, until no id uses it); they are valid at
//! least until the list is freed, so every query here runs while its [`DeviceList`] lives.

use std::ffi::{c_int, CStr};
use std::mem;
use std::ptr::NonNull;

use cmtwin::{
    AtomicCap, DeviceAttr, DeviceInfo, IdDevice, LinkLayer, Mtu, NodeType, PortAttr, PortState,
    TransportType,
};
use rdma_sys as sys;

use super::{check_ibv, last_errno, CResult, RawId};

/// The NULL-terminated array `rdma_get_devices` returns, given back by `rdma_free_devices`
/// on drop.
struct DeviceList {
    list: NonNull<*mut sys::ibv_context>,
    len: usize,
}

impl DeviceList {
    /// `rdma_get_devices`; ENODEV (or librdmacm's errno) when it returns NULL.
    fn get() -> CResult<DeviceList> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the array is owned by the wrapper until drop.
        let list = unsafe { sys::rdma_get_devices(&mut n) };
        let errno = last_errno();
        let list = NonNull::new(list).ok_or(if n == 0 { libc::ENODEV } else { errno })?;
        Ok(DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    /// The contexts, in librdmacm's order.
    fn contexts(&self) -> impl Iterator<Item = *mut sys::ibv_context> + '_ {
        // SAFETY: the array holds `len` contexts followed by NULL, and lives as long as `self`.
        (0..self.len).map(|i| unsafe { *self.list.as_ptr().add(i) })
    }

    /// The context of the device named `name`: ENODEV if there is none.
    fn find(&self, name: &str) -> CResult<*mut sys::ibv_context> {
        self.contexts()
            // SAFETY: every context of a live list is valid (module documentation).
            .find(|ctx| unsafe { device_name((**ctx).device) } == name)
            .ok_or(libc::ENODEV)
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from `rdma_get_devices` and is freed exactly once.
        unsafe { sys::rdma_free_devices(self.list.as_ptr()) }
    }
}

/// `ibv_get_device_name`.
///
/// # Safety
/// `device` is a valid device of an open context.
unsafe fn device_name(device: *mut sys::ibv_device) -> String {
    let name = sys::ibv_get_device_name(device);
    if name.is_null() {
        return String::new();
    }
    CStr::from_ptr(name).to_string_lossy().into_owned()
}

/// What identifies the device of context `ctx`.
///
/// # Safety
/// `ctx` is a valid open context.
unsafe fn info_of(ctx: *mut sys::ibv_context) -> DeviceInfo {
    let device = (*ctx).device;
    DeviceInfo {
        name: device_name(device),
        node_type: NodeType::from_raw((*device).node_type),
        transport_type: TransportType::from_raw((*device).transport_type),
        node_guid: u64::from_be(sys::ibv_get_device_guid(device)),
    }
}

/// `rdma_get_devices`: what identifies each device, in librdmacm's order; the list freed.
pub(crate) fn devices() -> CResult<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    // SAFETY: every context of a live list is valid.
    Ok(list.contexts().map(|ctx| unsafe { info_of(ctx) }).collect())
}

/// A count of `ibv_device_attr` (a C `int`, never negative) as `u32`.
fn count(n: c_int) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// `ibv_query_device` on the device named `name`.
pub(crate) fn query_device(name: &str) -> CResult<DeviceAttr> {
    let list = DeviceList::get()?;
    let ctx = list.find(name)?;
    // SAFETY: an all-zero `ibv_device_attr` is valid (integers and a char array).
    let mut a: sys::ibv_device_attr = unsafe { mem::zeroed() };
    // SAFETY: `ctx` is a valid context of the live list; `a` is a valid out-pointer.
    check_ibv(unsafe { sys::ibv_query_device(ctx, &mut a) })?;
    // SAFETY: the kernel NUL-terminates `fw_ver`; the zeroed array ends in NUL regardless.
    let fw_ver = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) };
    Ok(DeviceAttr {
        fw_ver: fw_ver.to_string_lossy().into_owned(),
        node_guid: u64::from_be(a.node_guid),
        sys_image_guid: u64::from_be(a.sys_image_guid),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: count(a.max_qp),
        max_qp_wr: count(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: count(a.max_sge),
        max_sge_rd: count(a.max_sge_rd),
        max_cq: count(a.max_cq),
        max_cqe: count(a.max_cqe),
        max_mr: count(a.max_mr),
        max_pd: count(a.max_pd),
        max_qp_rd_atom: count(a.max_qp_rd_atom),
        max_qp_init_rd_atom: count(a.max_qp_init_rd_atom),
        max_res_rd_atom: count(a.max_res_rd_atom),
        atomic_cap: AtomicCap::from_raw(a.atomic_cap),
        max_srq: count(a.max_srq),
        max_srq_wr: count(a.max_srq_wr),
        max_srq_sge: count(a.max_srq_sge),
        max_ah: count(a.max_ah),
        max_mcast_grp: count(a.max_mcast_grp),
        max_mcast_qp_attach: count(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: count(a.max_total_mcast_qp_attach),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    })
}

/// `ibv_query_port` on port `port` of the device named `name`.
pub(crate) fn query_port(name: &str, port: u8) -> CResult<PortAttr> {
    let list = DeviceList::get()?;
    let ctx = list.find(name)?;
    // SAFETY: an all-zero `ibv_port_attr` is valid (integers only).
    let mut a: sys::ibv_port_attr = unsafe { mem::zeroed() };
    // SAFETY: `ctx` is a valid context of the live list; `a` is a valid out-pointer of the
    // size the call is told (libibverbs' inline `ibv_query_port`, as C compiles it).
    check_ibv(unsafe { sys::___ibv_query_port(ctx, port, &mut a) })?;
    Ok(PortAttr {
        state: PortState::from_raw(a.state),
        max_mtu: Mtu::from_raw(a.max_mtu),
        active_mtu: Mtu::from_raw(a.active_mtu),
        gid_tbl_len: count(a.gid_tbl_len),
        port_cap_flags: a.port_cap_flags,
        max_msg_sz: a.max_msg_sz,
        lid: a.lid,
        sm_lid: a.sm_lid,
        lmc: a.lmc,
        max_vl_num: a.max_vl_num,
        pkey_tbl_len: a.pkey_tbl_len,
        active_width: a.active_width,
        active_speed: a.active_speed,
        phys_state: a.phys_state,
        link_layer: LinkLayer::from_raw(a.link_layer),
    })
}

impl RawId {
    /// The id's device and port (`id->verbs->device`, `id->port_num`); `None` while
    /// `id->verbs` is NULL.
    pub(crate) fn device(&self) -> Option<IdDevice> {
        // SAFETY: live id; `verbs` is NULL or a context librdmacm keeps open while the id
        // exists.
        unsafe {
            let id = self.as_ptr();
            let verbs = (*id).verbs;
            if verbs.is_null() || (*verbs).device.is_null() {
                return None;
            }
            Some(IdDevice {
                device: info_of(verbs),
                port_num: (*id).port_num,
            })
        }
    }
}
