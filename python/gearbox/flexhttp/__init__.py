"""FlexHTTP (docs/papers.md, "FlexHTTP: An Intelligent and Scalable HTTP Version Selection System"):
HTTP/2 or HTTP/3 per page load. The agent server (§3.3: probe exchange, global trace pool, k-means
labels, the global random forest), and the lab's dataset and training (§4). docs/flexhttp.md."""
