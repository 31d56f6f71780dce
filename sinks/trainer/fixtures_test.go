package trainer

import (
	"github.com/wmrl/wmrl/topics"
)

var names = topics.NewNames("t.")

const smallChunk = 4096
