//! The conformance scenarios, one file per area of the CM, each a `pub fn name<T: TestBed>(bed:
//! &T)` that panics on a violation of CM-SEMANTICS.md (the section is named in its doc).
//!
//! [`conformance_suite!`](crate::conformance_suite) turns them into one `#[test]` each for a
//! given bed; [`scenarios`] lists them for code that runs them itself (the determinism check).
//!
//! Every scenario holds on both backends: waits are bounded ([`crate::steps::WAIT`]), ports
//! come from `fresh_port`, servers bind to `server_ip`, clients resolve the server's address,
//! and nothing depends on wall-clock timings (those checks live in `tests/sim_only.rs`).

pub mod acks;
pub mod addrinfo;
pub mod binding;
pub mod channels;
pub mod connect;
pub mod disconnect;
pub mod handles;
pub mod helpers;
pub mod legality;
pub mod migrate;
pub mod multicast;
pub mod notify;
pub mod private_data;
pub mod reject;
pub mod resolution;
pub mod sync_ids;
pub mod ud;
pub mod user_events;

use crate::TestBed;

/// The list of every scenario, by area. Invokes `__conformance_expand!` with `$mode` and
/// `$args` in front of the list.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_scenarios {
    ($($head:tt)*) => {
        $crate::__conformance_expand! { $($head)*
            channels {
                nonblocking_fetch_on_empty_channel_is_eagain,
                timed_fetch_on_empty_channel_is_etimedout,
                blocking_fetch_returns_pending_event,
                events_stay_on_their_channel,
                one_channel_serves_several_ids,
                destroy_channel_with_live_id_is_ebusy,
                destroy_id_discards_queued_events,
                waiting_on_two_channels_takes_the_ready_one,
                poll_channels_reports_readiness_without_taking
            }
            resolution {
                resolve_addr_then_route,
                resolve_addr_keeps_bound_source,
                resolve_addr_twice_is_einval,
                resolve_route_before_addr_is_einval,
                resolve_route_zero_timeout_is_einval_and_retry_works,
                resolve_route_twice_is_einval,
                resolve_addr_family_mismatch_is_einval,
                resolve_addr_without_route_is_enetunreach,
                resolve_loopback_destination
            }
            connect {
                connect_request_describes_the_peer,
                accept_establishes_both_sides,
                connect_without_qp_gives_connect_response_then_establish,
                listener_serves_several_connections,
                wildcard_listener_accepts_requests,
                accept_after_initiator_gave_up_is_einval,
                backlog_slot_returns_when_request_is_fetched,
                accept_parameters_reach_the_client
            }
            reject {
                reject_gives_rejected_28_with_data,
                no_listener_gives_rejected_8,
                destroying_unaccepted_request_gives_rejected_28,
                destroyed_listener_gives_rejected_8,
                active_side_rejects_after_connect_response,
                destroying_active_id_after_connect_response_rejects_passive,
                destroying_listener_rejects_its_queued_requests,
                destroying_accepted_unestablished_id_rejects_client
            }
            disconnect {
                client_disconnect_reaches_both_sides,
                server_disconnect_reaches_both_sides,
                simultaneous_disconnect,
                disconnect_again_is_harmless,
                unanswered_disconnect_leaves_initiator_waiting,
                destroying_connected_id_disconnects_peer
            }
            private_data {
                connect_data_at_maximum_is_delivered,
                connect_data_is_zero_padded,
                connect_data_over_maximum_is_einval,
                accept_data_at_maximum_is_delivered,
                accept_data_is_zero_padded,
                accept_data_over_maximum_is_einval,
                reject_data_at_maximum_is_delivered,
                reject_data_over_maximum_is_einval,
                private_data_is_null_exactly_where_librdmacm_leaves_it
            }
            binding {
                bind_port_zero_picks_an_ephemeral_port,
                bind_same_address_and_port_is_eaddrinuse,
                bind_wildcard_over_specific_is_eaddrnotavail,
                port_spaces_are_independent,
                destroy_releases_the_port,
                bind_unconfigured_address_fails
            }
            legality {
                bind_twice_is_einval,
                bind_after_resolve_or_listen_is_einval,
                listen_twice_is_einval,
                listen_on_idle_id_autobinds,
                connect_before_route_is_einval,
                connect_rc_without_qp_or_params_is_einval,
                connect_twice_is_einval,
                accept_or_reject_on_listener_is_einval,
                connection_calls_on_idle_id_are_einval,
                resolve_addr_on_listener_is_einval,
                accept_or_establish_after_establishment_is_einval,
                notify_on_established_id_is_eisconn,
                option_legality,
                connect_after_rejected_is_einval
            }
            notify {
                comm_est_establishes_the_passive_side_once,
                notify_with_other_event_is_einval
            }
            acks {
                destroy_id_with_unacked_event_is_ebusy,
                unacked_connect_request_holds_the_listener,
                unacked_event_holds_only_its_id,
                events_are_delivered_once_and_acked_in_any_order,
                dropped_event_is_acknowledged_by_its_drop,
                dropped_connect_request_releases_the_listener,
                explicit_ack_then_drop_acks_once
            }
            helpers {
                expect_event_names_what_came_instead,
                set_context_is_what_requests_inherit,
                dispatcher_routes_events_by_context
            }
            handles {
                invalid_port_space_is_einval,
                destroyed_id_is_enoent,
                destroyed_channel_is_ebadf,
                foreign_handles_are_refused
            }
            sync_ids {
                sync_resolution_returns_after_the_event,
                sync_connect_rejected_is_econnrefused,
                get_request_on_sync_listener,
                get_request_on_async_listener_is_einval,
                get_request_on_non_listening_sync_id_is_einval,
                sync_child_migrated_to_channel_connects,
                migrate_to_sync_twice_is_einval,
                sync_ud_connect_statuses_become_errnos
            }
            user_events {
                write_cm_event_refuses_other_kinds,
                user_event_numbering_and_name,
                user_event_round_trips_status_and_arg,
                user_events_keep_fifo_order_in_any_state,
                queued_user_event_follows_migration,
                user_event_on_unaccepted_child_is_dropped,
                user_event_on_synchronous_id
            }
            migrate {
                migrate_moves_queued_and_later_events,
                migrate_with_unacked_event_is_ebusy
            }
            ud {
                ud_connect_is_established_with_ud_data,
                ud_reject_is_unreachable_2,
                ud_no_listener_is_unreachable_1,
                ud_private_data_limits
            }
            multicast {
                join_then_leave,
                join_preconditions,
                resolve_addr_to_a_group_then_join,
                each_join_is_a_membership,
                send_only_join_then_leave
            }
            addrinfo {
                numeric_destination_resolves,
                query_without_resolution_is_enoent,
                unknown_name_fails_at_once_without_event
            }
        }
    };
}

/// Expands the scenario list in one of three modes: `tests` (one `#[test]` per scenario),
/// `seeded_tests` (each test runs the scenario once per seed) and `list` (a `Vec` of names and
/// function pointers).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_expand {
    (tests ($make:expr) $attrs:tt $($area:ident { $($name:ident),* $(,)? })*) => {
        $(
            #[allow(unused_imports)]
            mod $area {
                use super::*;
                $(
                    $crate::__conformance_test! { $attrs fn $name() {
                        let bed = $make;
                        $crate::conformance::$area::$name(&bed);
                    } }
                )*
            }
        )*
    };
    (seeded_tests ($seed:ident, $seeds:expr, $make:expr) $attrs:tt
        $($area:ident { $($name:ident),* $(,)? })*) => {
        $(
            #[allow(unused_imports)]
            mod $area {
                use super::*;
                $(
                    $crate::__conformance_test! { $attrs fn $name() {
                        for $seed in $seeds {
                            let bed = $make;
                            eprintln!(
                                "{} with seed {}",
                                concat!(stringify!($area), "::", stringify!($name)),
                                $seed
                            );
                            $crate::conformance::$area::$name(&bed);
                        }
                    } }
                )*
            }
        )*
    };
    (list ($bed:ty) $($area:ident { $($name:ident),* $(,)? })*) => {
        ::std::vec![
            $($(
                (
                    concat!(stringify!($area), "::", stringify!($name)),
                    $crate::conformance::$area::$name::<$bed> as fn(&$bed),
                ),
            )*)*
        ]
    };
}

/// One `#[test]` function with the suite's extra attributes.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test {
    ([$($attr:tt)*] fn $name:ident() $body:block) => {
        #[test]
        $($attr)*
        fn $name() $body
    };
}

/// Expands to one `#[test]` per conformance scenario, each building its bed with the given
/// expression and running the scenario on it. Tests are grouped in one module per area
/// (`channels::…`, `connect::…`), so `cargo test connect::` selects an area.
///
/// Forms:
/// * `conformance_suite!(make_bed)`: e.g. `conformance_suite!(SimBed::new(7))`.
/// * `conformance_suite!(make_bed, #[ignore = "needs RDMA"])`: attributes applied to every
///   test (the real backend's suite is ignored unless asked for).
/// * `conformance_suite!(for seed in [1, 2, 3] => SimBed::new(seed))`: every test runs once
///   per seed (attributes may follow after a comma, too).
///
/// Names used by the bed expression must be in scope where the macro is invoked (each area's
/// module imports `super::*`).
#[macro_export]
macro_rules! conformance_suite {
    (for $seed:ident in $seeds:expr => $make:expr $(, #[$attr:meta])* $(,)?) => {
        $crate::__conformance_scenarios! { seeded_tests ($seed, $seeds, $make) [$(#[$attr])*] }
    };
    ($make:expr $(, #[$attr:meta])* $(,)?) => {
        $crate::__conformance_scenarios! { tests ($make) [$(#[$attr])*] }
    };
}

/// A scenario's name (`"area::name"`) and function.
pub type Scenario<T> = (&'static str, fn(&T));

/// Every scenario with its name, for running the suite by hand, e.g. to compare two runs of
/// the simulator.
pub fn scenarios<T: TestBed>() -> Vec<Scenario<T>> {
    crate::__conformance_scenarios! { list (T) }
}
