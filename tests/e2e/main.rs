//! End-to-end: the real `serve` binary behind a real MutatingWebhookConfiguration of a real
//! kube-apiserver (the release testbed/k8s/go.mod pins, built by testbed/build.sh), with the
//! real Deployment, ReplicaSet, StatefulSet and DaemonSet controllers creating the pods. No
//! container runs: a test kubelet marks pods Ready.
#![allow(clippy::too_many_lines)] // a test or bench reads as one scenario

#[path = "../support/mod.rs"]
mod support;

mod bake;
mod canary_metrics;
mod chart;
mod configmaps;
mod deploy;
mod drift;
mod engine;
mod evictions;
mod fleet;
mod fleet_rollout;
mod foreign;
mod history;
mod in_place;
mod injection;
mod monitoring;
mod native;
mod pod_resources;
mod policy;
mod policy_mode;
mod promotion;
mod rollout_command;
mod toolbox;
mod traces;

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::cluster::{
    TestContext, configmap, kustomize, of_kind, put_config, rollout_args, scope_args,
};
use support::e2e::*;
use support::injector::eventually;
use support::kubelet::NODES;
