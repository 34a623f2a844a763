//! Ids: create, destroy (with the IB CM side effects of §7.4), migrate between channels.

use cmtwin::{Call, ChannelHandle, CmError, Errno, IdHandle, PortSpace, Result};

use crate::store::OptKey;
use crate::world::{ChanKey, CmState, HostKey, Id, IdKey, World};

impl World {
    /// `rdma_create_id`: without a channel the id is synchronous, with a private channel.
    pub(crate) fn create_id(
        &mut self,
        host: HostKey,
        channel: Option<ChannelHandle>,
        context: u64,
        ps: PortSpace,
    ) -> Result<IdHandle> {
        let call = Call::CreateId;
        let chan = channel.map(|c| self.chan_key(host, call, c)).transpose()?;
        if !ps.is_valid() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("invalid port space {ps:?}"),
            ));
        }
        let key = self.fresh_key();
        let (channel, sync) = match chan {
            Some(c) => (c, false),
            None => (self.new_private_channel(host, key), true),
        };
        let id = Id::new(host, channel, sync, context, ps);
        self.kernel.ids.insert(key, id);
        Ok(self.id_handle(key))
    }

    /// `rdma_destroy_id`: EBUSY while fetched events of the id are unacknowledged (librdmacm
    /// would block forever); otherwise the kernel's side effects, then the id is gone.
    pub(crate) fn destroy_id(&mut self, host: HostKey, h: IdHandle) -> Result<()> {
        let call = Call::DestroyId;
        let key = self.id_key(host, call, h)?;
        // A synchronous id's current event is acknowledged by librdmacm itself.
        if let Some(held) = self.id_mut(key).sync_event.take() {
            self.release_ticket(held.ticket);
        }
        let unacked = self.unacked_of(key);
        if !unacked.is_empty() {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!(
                    "unacknowledged events would block rdma_destroy_id forever: {}",
                    unacked.join(", ")
                ),
            ));
        }
        self.destroy_id_now(key);
        Ok(())
    }

    /// What the kernel does for a process's channel file closed under its ids (the process
    /// exited or crashed: ucma's close): each id is destroyed as by `rdma_destroy_id`, its
    /// fetched events freed with the file rather than waited for.
    pub(crate) fn close_channel_file(&mut self, chan: ChanKey) {
        let ids: Vec<IdKey> = (self.kernel.ids.keys_sorted().into_iter())
            .filter(|k| self.id(*k).channel == chan)
            .collect();
        for key in ids {
            if !self.kernel.ids.contains_key(&key) {
                continue; // a listener's child, gone with its listener
            }
            if let Some(held) = self.id_mut(key).sync_event.take() {
                self.release_ticket(held.ticket);
            }
            if self.id(key).unacked > 0 {
                for ticket in self.kernel.outstanding.counted_against(key) {
                    self.release_ticket(ticket);
                }
            }
            self.destroy_id_now(key);
        }
        self.kernel.channels.remove(&chan);
        self.sched.channel_changed(chan);
    }

    /// `rdma_destroy_id`'s side effects once nothing holds it back: a listener's unfetched
    /// requests are refused, the connection is ended as the CM ends it, the id is gone.
    fn destroy_id_now(&mut self, key: IdKey) {
        // Unfetched requests of a listener: their children are destroyed, initiators get REJ 28.
        if self.id(key).listen().is_some() {
            let chan = self.id(key).channel;
            let children: Vec<_> = self.kernel.channels[&chan]
                .queue
                .iter()
                .filter(|q| q.counted_against == key && q.owner != key)
                .map(|q| q.owner)
                .collect();
            for child in &children {
                self.discard_queued(*child, |_| true);
            }
            for child in children {
                self.remove_id(child);
            }
        }
        self.id_mut(key).state = CmState::Idle;
        self.remove_id(key);
    }

    /// Removes an id with every side effect: protocol, port, queued events, private channel.
    pub(crate) fn remove_id(&mut self, key: crate::world::IdKey) {
        self.verbs_forget_id(key);
        if let Some(ep) = self.id(key).ep.get() {
            self.destroy_endpoint(ep);
        }
        self.release_port(key);
        self.discard_queued(key, |_| true);
        // Leftover outstanding events of a child counted against nobody else.
        if self.id(key).unacked > 0 {
            for ticket in self.kernel.outstanding.counted_against(key) {
                self.release_ticket(ticket);
            }
        }
        let id = self.kernel.ids.remove(&key).expect("live id");
        if self
            .kernel
            .channels
            .get(&id.channel)
            .is_some_and(|c| c.private_for == Some(key))
        {
            self.kernel.channels.remove(&id.channel);
        }
    }

    /// `rdma_migrate_id`.
    pub(crate) fn migrate_id(
        &mut self,
        host: HostKey,
        h: IdHandle,
        channel: Option<ChannelHandle>,
    ) -> Result<()> {
        let call = Call::MigrateId;
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let target = match channel {
            Some(c) => self.chan_key(host, call, c)?,
            None if self.id(key).sync => {
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    "the id is already synchronous",
                ));
            }
            None => self.new_private_channel(host, key),
        };
        if let Some(held) = self.id_mut(key).sync_event.take() {
            self.release_ticket(held.ticket);
        }
        // librdmacm waits for the events the kernel reported for this id (`events_reported`
        // of its ucma context): a CONNECT_REQUEST counts against its listener, not the child
        // it names, so a child whose request is unacknowledged may move (librdmacm itself
        // migrates a synchronous listener's children so, in ucma_process_conn_req).
        let unacked: Vec<String> = self
            .kernel
            .outstanding
            .iter()
            .filter(|(_, o)| o.counted_against == key)
            .map(|(t, o)| format!("{} (ticket {t})", o.kind))
            .collect();
        if !unacked.is_empty() {
            if channel.is_none() {
                self.kernel.channels.remove(&target);
            }
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!(
                    "unacknowledged events would block rdma_migrate_id forever: {}",
                    unacked.join(", ")
                ),
            ));
        }
        let old = self.id(key).channel;
        // The id's queued events move with it, appended in order (§12.4).
        // The id's own events and, for a listener, the requests counted against it.
        let moved = self
            .kernel
            .channels
            .get_mut(&old)
            .expect("channel")
            .queue
            .take_where(|q| q.counted_against == key);
        for q in &moved {
            if q.info.kind == cmtwin::EventKind::ConnectRequest {
                self.id_mut(q.owner).request_queued_on = OptKey::some(target);
            }
        }
        if !moved.is_empty() {
            self.sched.channel_changed(target);
        }
        self.kernel
            .channels
            .get_mut(&target)
            .expect("channel")
            .queue
            .extend(moved);
        if self
            .kernel
            .channels
            .get(&old)
            .is_some_and(|c| c.private_for == Some(key))
        {
            // A process blocked in a synchronous call of the id wakes to find the channel gone
            // (its call fails with EBADF; librdmacm's would wait on the closed channel forever).
            self.kernel.channels.remove(&old);
            self.sched.channel_changed(old);
        }
        let id = self.id_mut(key);
        id.channel = target;
        id.sync = channel.is_none();
        Ok(())
    }
}
