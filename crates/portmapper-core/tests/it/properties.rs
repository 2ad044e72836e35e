//! Property tests (filled in below).
