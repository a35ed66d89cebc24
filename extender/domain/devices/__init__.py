"""Dynamic Resource Allocation (resource.k8s.io/v1) as the scheduling core counts it.

Pure: DeviceClasses, ResourceSlices and ResourceClaims read from API JSON
(`objects`), a class's CEL selectors evaluated on a device (`selectors`), and the
devices per node and per class that remain for pods (`inventory`), which the
watch folds into the node's allocatable so the planner counts DRA-served
resources like any other (docs/dra.md).
"""
