module sigs.k8s.io/mcs-api/controllers
