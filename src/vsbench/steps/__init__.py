"""Pipeline steps, one library call each with tracking and a manifest (base): the ABID pipeline's
(abid) and the similarity pipeline's (similarity); each Kubeflow component body calls one."""
