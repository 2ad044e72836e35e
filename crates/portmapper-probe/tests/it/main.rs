//! Integration tests of the prober against real sockets on loopback (and, in `netns`, on pod
//! IPs inside a network namespace the test creates itself).

// Helpers outside `#[test]` functions are test code too: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

mod fairness;
mod fuzz;
mod grpc;
mod http;
mod netns;
mod nonblocking;
mod prober;
mod resources;
mod safety;
mod support;
mod tcp;
mod webhook;
