//! Private-data limits, enforced before librdmacm (which does not check them, CM-SEMANTICS
//! §16.5): more than the transport allows for the operation is EINVAL, never truncated.

use cmtwin::{max_private_data, Call, CmError, PrivateDataOp, Result, Transport};

use crate::err;
use crate::ffi::{RawId, QPT_UD, TRANSPORT_IWARP};

/// The transport of the id's device (IB and RoCE share their limits; they are reported as
/// RoCE here, which only matters for the limits).
pub(crate) fn transport_of(raw: &RawId) -> Option<Transport> {
    raw.transport_type().map(|t| {
        if t == TRANSPORT_IWARP {
            Transport::Iwarp
        } else {
            Transport::Roce
        }
    })
}

/// Checks `len` bytes of private data for `op` (`ud_op` on UD ids) on the id's transport.
pub(crate) fn check(
    call: Call,
    raw: &RawId,
    op: PrivateDataOp,
    ud_op: PrivateDataOp,
    len: usize,
) -> Result<()> {
    if len > 255 {
        return Err(too_long(call, len, 255, "the API (a u8 length)"));
    }
    let op = if raw.qp_type() == QPT_UD { ud_op } else { op };
    if let Some(transport) = transport_of(raw) {
        let max = max_private_data(transport, op);
        if len > max {
            return Err(too_long(
                call,
                len,
                max,
                &format!("{op:?} on {transport:?}"),
            ));
        }
    }
    Ok(())
}

fn too_long(call: Call, len: usize, max: usize, what: &str) -> CmError {
    err(
        call,
        libc::EINVAL,
        format!("{len} bytes of private data exceed the limit of {max} bytes for {what}"),
    )
}
