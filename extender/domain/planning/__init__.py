"""Pure placement over the cluster: what fits where (`node_fit`, `node_fill`,
`planner`), node order and scores, which members a plan takes, what a held gang
lacks, kube-scheduler's restrictions, and the order held gangs are planned in
(`queue`: the shared state holds each gang's rank, so it sits below it).
"""
