use super::*;

#[test]
fn jobs_and_cronjobs_are_named_as_kubectl_names_them_beside_workloads() {
    for (given, kind, name) in [
        ("web", SubjectKind::Workload(WorkloadKind::Pod), "web"),
        (
            "deploy/web",
            SubjectKind::Workload(WorkloadKind::Deployment),
            "web",
        ),
        ("job/once", SubjectKind::Batch(BatchKind::Job), "once"),
        (
            "jobs.batch/once",
            SubjectKind::Batch(BatchKind::Job),
            "once",
        ),
        ("Job/once", SubjectKind::Batch(BatchKind::Job), "once"),
        (
            "cj/nightly",
            SubjectKind::Batch(BatchKind::CronJob),
            "nightly",
        ),
        (
            "CronJob/nightly",
            SubjectKind::Batch(BatchKind::CronJob),
            "nightly",
        ),
        (
            "cronjobs.v1beta1.batch/nightly",
            SubjectKind::Batch(BatchKind::CronJob),
            "nightly",
        ),
    ] {
        assert_eq!(subject(given).unwrap(), (kind, name), "{given}");
    }
    for refused in [
        "job.apps/once",
        "cronjob.v1.apps/n",
        "svc/web",
        "job/",
        "job/a/b",
    ] {
        assert!(subject(refused).is_err(), "{refused}");
    }
}
