//! Integration tests of portmapper-core: planner behaviours and properties.

mod fixtures;
mod fuzz;
mod gate;
mod hostile;
mod planner;
mod network_lookups;
mod properties;
mod trigger;
