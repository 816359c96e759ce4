//! `fenzi-proxy`: the network side of fenzi. It asks `fenzi-policy` for every decision and carries it out.
