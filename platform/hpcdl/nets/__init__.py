"""Networks defined once, as data, in Caffe's layer vocabulary; each backend builds them."""

from hpcdl.nets.spec import Layer, NetSpec, list_nets, load_net

__all__ = ["Layer", "NetSpec", "list_nets", "load_net"]
