//! Targeted faults on data packets, for tests: lose or delay the next ones put on the wire.

use std::time::Duration;

use crate::{Fabric, FabricError, MAX_SIM_DURATION};

use super::DataFault;

impl Fabric {
    /// Loses the next `count` data packets put on the wire anywhere on the fabric (requests,
    /// acknowledgements and responses alike, in the order they are sent).
    ///
    /// On iWARP a lost segment is TCP's to retransmit, which the simulator does only while the
    /// QP lives: an `rdma_disconnect` or a destroy before it is acknowledged ends the
    /// retransmission, and the peer gets the close without the lost bytes (its receives are
    /// flushed), where TCP never delivers a FIN ahead of bytes sent before it (it keeps
    /// retransmitting them after the close). Not modelled yet.
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
