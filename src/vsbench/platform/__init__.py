"""The platform that runs the steps: kfp.local runners (subprocess and container),
compiling for a cluster and cluster settings, the KFP API client, and the local S3 endpoint the
demo and the tests serve data from. The benchmark science lives elsewhere and knows nothing of it."""
