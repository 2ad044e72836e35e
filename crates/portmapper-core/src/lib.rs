//! The pure heart of portmapper: the membership model and the EndpointSlice planner. No API
//! client, no I/O: everything here is a function of its inputs, so the operator, the prober and
//! the tests share one definition of what must be published.

pub mod budget;
pub mod check;
pub mod claim;
pub mod compact_slice;
pub mod consumers;
pub mod decision;
pub mod events;
pub mod interned;
pub mod membership;
pub mod network;
pub mod ownership;
pub mod planner;
pub mod pod_record;
pub mod pool;
pub mod report;
pub mod sync_stats;
pub mod target;
pub mod writes;

pub use check::{CheckContext, GateTypes, PUBLISHED_GATE, has_gate, has_published_gate};
pub use claim::{ClaimRank, publisher};
pub use decision::{Decision, Verdict, all_of, any_of};
pub use events::{EventReason, EventType, Ledger, PlannedEvent};
pub use membership::{
    Evaluation, PortRules, check_at, evaluate_port, port_rules, publish_not_ready,
};
pub use network::{CheckPosition, NetworkDecisions, NetworkKey, NetworkLookup};
pub use ownership::{EndpointsOwner, HeldName, Ownership, endpoints_owner, ownership};
pub use pod_record::{Pairs, PodRecord};
pub use pool::{SelectorError, pod_in_pool, selector_matches};
pub use target::{PodAddress, ResolvedPort, ResolvedTarget, pod_address, resolve_target_port};

pub use planner::{
    Deletion, EvalMemo, GatePeers, NameCollision, Plan, PlanError, PlanInput, PlanWarning,
    PlannedEndpoints, PlannedSlice, PodGate, WriteAction, plan, plan_with_memo, service_families,
};
