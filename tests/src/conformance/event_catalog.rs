//! Events of the catalog (CM-SEMANTICS §5.1) that only a fault produces and that no other area
//! covers: ADDR_CHANGE.

use cmtwin::{EventKind, PortSpace};

use crate::steps::{expect_event_for, expect_no_event, listen_on, teardown_listener};
use crate::TestBed;

/// §5.1 (ADDR_CHANGE): an address change of the server's device (a bonding fail-over) reaches
/// the listener attached to it with status 0 and no data, once; the listener keeps working.
pub fn address_change_reaches_attached_ids<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    bed.change_address()
        .unwrap_or_else(|e| panic!("address change: {e}"));
    let change = expect_event_for(
        bed.server(),
        listener.channel,
        EventKind::AddrChange,
        listener.id,
        0,
    );
    assert!(
        change.private_data.is_empty(),
        "ADDR_CHANGE carries no data"
    );
    expect_no_event(bed.server(), listener.channel);
    teardown_listener(bed, &listener);
}
