//! Integration tests of portmapper-core: planner behaviours and properties.

mod fixtures;
mod fuzz;
mod gate;
mod hostile;
mod network_lookups;
mod planner;
mod port_sets;
mod properties;
mod trigger;
