//! The pure heart of portmapper: the membership model and the EndpointSlice planner.
