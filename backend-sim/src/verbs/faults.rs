//! Targeted faults on data packets, for tests: lose or delay the next ones put on the wire.

use std::time::Duration;

use crate::{Fabric, FabricError, MAX_SIM_DURATION};

use super::DataFault;

impl Fabric {
    /// Loses the next `count` data packets put on the wire anywhere on the fabric (requests,
    /// acknowledgements and responses alike, in the order they are sent).
    ///
    /// On iWARP a lost segment is TCP's to retransmit, on TCP's timer, and TCP keeps doing so
    /// after siw dropped the connection (`rdma_disconnect`, a move to ERROR, a QP or id
    /// destroyed: siw's plain socket close): the peer's QP, if still in RTS, takes the bytes
    /// before the close reaches it (the FIN that overtook them waits in its TCP), and a peer
    /// that closed meanwhile answers them with a reset. Until TCP gives up, as for a live QP.
    pub fn drop_data_packets(&self, count: u32) -> Result<(), FabricError> {
        if count > 0 {
            let fault = DataFault { count, delay: None };
            self.lock_for("drop_data_packets")?
                .verbs
                .faults
                .push_back(fault);
        }
        Ok(())
    }

    /// Delays the next `count` data packets by `delay` beyond the usual latency (later
    /// packets of the same link wait behind them: links are FIFO).
    pub fn delay_data_packets(&self, count: u32, delay: Duration) -> Result<(), FabricError> {
        if count > 0 {
            let fault = DataFault {
                count,
                delay: Some(delay.min(MAX_SIM_DURATION)),
            };
            self.lock_for("delay_data_packets")?
                .verbs
                .faults
                .push_back(fault);
        }
        Ok(())
    }
}
