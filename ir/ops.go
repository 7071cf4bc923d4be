package ir

//go:generate go run ./internal/opgen -in ops.go -out ops_gen.go

// opTable is the op table: one row per op, indexed by Op. It is the single
// definition of every op; internal/opgen reads the Name and Doc of each row
// (in order) to write the Op enum, its String method and name lookup into
// ops_gen.go. Add an op by adding a row here and running go generate.
//
// Conventions for Doc: shapes are row-major, outermost first; T is the
// tokens of the step, S its sequences; "seq(t)" and "pos(t)" are the
// sequence and position of token t; x[t,i] indexes the innermost axis last.
var opTable = [...]opDef{
	{Name: "invalid", Group: GroupNone, Doc: "the zero Op; never valid in a graph."},

	// --- leaves: inputs of a step and weights ---
	{
		Name: "tokens", Group: GroupLeaf,
		Shape: shapeOf(T), Type: typeI32,
		Doc: "I32[T]: the step's token ids, the tokens of each sequence contiguous and in batch order.",
	},
	{
		Name: "positions", Group: GroupLeaf,
		Shape: shapeOf(T), Type: typeI32,
		Doc: "I32[T]: pos(t), the position of token t within its sequence.",
	},
	{
		Name: "hidden_in", Group: GroupLeaf,
		Attrs: []AttrSpec{{"dim", AttrInt}},
		Shape: shapeHiddenIn, Type: typeF32,
		Doc: "F32[T,dim]: the residual stream entering a pipeline stage, row t for token t of the step (the tokens order above); " +
			"its value is the previous stage's hidden_out of the same step, bit for bit.",
	},
	{
		Name: "weight", Group: GroupLeaf,
		Attrs: []AttrSpec{{"name", AttrString}, {"type", AttrDType}, {"ne", AttrInts}},
		Shape: shapeWeight, Type: typeWeight,
		Doc: "type[ne reversed]: the named model tensor, stored as type with GGUF dims ne (ne[0] contiguous); " +
			"its value has row-major shape [ne[n-1],…,ne[0]], so a matrix of ne [in,out] is out rows of in elements.",
	},

	// --- movement / memory ---
	{
		Name: "embed", Group: GroupMovement,
		Args:  []Operand{{"table", ArgWeight, false}, {"ids", ArgI32, false}},
		Shape: shapeEmbed, Type: typeF32,
		Doc: "F32[T,E]: y[t,:] = table[ids[t],:] dequantised; table is any dtype with shape [V,E]; an id outside [0,V) is an error at run time.",
	},
	{
		Name: "reshape", Group: GroupMovement,
		Args:  []Operand{{"x", ArgF32, false}},
		Attrs: []AttrSpec{{"dims", AttrInts}},
		Shape: shapeReshape, Type: typeF32,
		Doc: "F32[x0,dims…]: the same elements in the same order, the inner axes of x re-split as dims (their product equals the product of x's inner axes); x's outer axis is kept.",
	},
	{
		Name: "last_tokens", Group: GroupMovement,
		Args:  []Operand{{"x", ArgF32, false}},
		Shape: shapeLastTokens, Type: typeF32,
		Doc: "F32[S,E]: y[s,:] = x[t,:] for t the last token of sequence s in the step.",
	},

	// --- elementwise unary ---
	{
		Name: "silu", Group: GroupUnary,
		Args:  []Operand{{"x", ArgF32, false}},
		Shape: shapeSame, Type: typeF32,
		Doc: "same shape: y = x / (1 + exp(-x)).",
	},
	{
		Name: "scale", Group: GroupUnary,
		Args:  []Operand{{"x", ArgF32, false}},
		Attrs: []AttrSpec{{"factor", AttrFloat}},
		Shape: shapeScale, Type: typeF32,
		Doc: "same shape: y = x · float32(factor) (Gemma's embeddings times √dim, factor the float32 of that root).",
	},
	{
		Name: "softcap", Group: GroupUnary,
		Args:  []Operand{{"x", ArgF32, false}},
		Attrs: []AttrSpec{{"cap", AttrFloat}},
		Shape: shapeSoftcap, Type: typeF32,
		Doc: "same shape: y = cap · tanh(x / cap), cap > 0 (Gemma 2's final logit soft-capping).",
	},

	// --- elementwise binary ---
	{
		Name: "add", Group: GroupBinary,
		Args:  []Operand{{"x", ArgF32, false}, {"y", ArgF32, false}},
		Shape: shapeSameBinary, Type: typeF32,
		Doc: "same shape: z = x + y (the residual add).",
	},
	{
		Name: "mul", Group: GroupBinary,
		Args:  []Operand{{"x", ArgF32, false}, {"y", ArgF32, false}},
		Shape: shapeSameBinary, Type: typeF32,
		Doc: "same shape: z = x · y elementwise.",
	},
	{
		Name: "swiglu", Group: GroupBinary,
		Args:  []Operand{{"gate", ArgF32, false}, {"up", ArgF32, false}},
		Shape: shapeSameBinary, Type: typeF32,
		Doc: "same shape: z = silu(gate) · up = gate / (1 + exp(-gate)) · up.",
	},
	{
		Name: "geglu", Group: GroupBinary,
		Args:  []Operand{{"gate", ArgF32, false}, {"up", ArgF32, false}},
		Shape: shapeSameBinary, Type: typeF32,
		Doc: "same shape: z = gelu_tanh(gate) · up, gelu_tanh(g) = g/2 · (1 + tanh(√(2/π) · (g + 0.044715·g³))) (Gemma's feed-forward).",
	},
	{
		Name: "bias_add", Group: GroupBinary,
		Args:  []Operand{{"x", ArgF32, false}, {"bias", ArgWeight, false}},
		Shape: shapeBias, Type: typeF32,
		Doc: "shape of x [T,N]: y[t,n] = x[t,n] + bias[n]; bias is a [N] weight of any float dtype.",
	},

	// --- reductions ---
	{
		Name: "rms_norm", Group: GroupReduce,
		Args:  []Operand{{"x", ArgF32, false}, {"weight", ArgWeight, false}},
		Attrs: []AttrSpec{{"eps", AttrFloat}},
		Shape: shapeNorm, Type: typeF32,
		Doc: "shape of x [...,D]: over the innermost axis, y[...,i] = x[...,i] / sqrt(mean(x[...,:]²) + eps) · weight[i], " +
			"the mean of squares accumulated in float64; weight is [D] (D = E for the block norms, head_dim for per-head q/k norms).",
	},

	// --- matrix products ---
	{
		Name: "matmul", Group: GroupMatmul,
		Args:  []Operand{{"x", ArgF32, false}, {"w", ArgWeight, false}},
		Shape: shapeMatmul, Type: typeF32,
		Doc: "F32[T,N]: y = x · Wᵀ, y[t,n] = Σ_k x[t,k] · W[n,k]; W is a [N,K] weight (GGUF ne [K,N]) of any dtype, read row by row as stored.",
	},

	// --- model ops ---
	{
		Name: "rope", Group: GroupModel,
		Args: []Operand{{"x", ArgF32, false}, {"pos", ArgI32, false}, {"freq_factors", ArgWeight, true}},
		Attrs: []AttrSpec{
			{"style", AttrString}, {"dims", AttrInt}, {"base", AttrFloat},
			{"scaling", AttrString}, {"factor", AttrFloat}, {"orig_ctx", AttrInt},
			{"low_freq", AttrFloat}, {"high_freq", AttrFloat},
		},
		Shape: shapeRope, Type: typeF32,
		Doc: "F32[T,H,D] rotated: for i < dims/2, θ_i = RopeParams.Thetas()[i] (base^(-2i/dims), then llama3 or yarn scaling " +
			"(low_freq, high_freq: llama3's low/high_freq_factor, yarn's beta_slow/beta_fast) or ÷freq_factors[i]), " +
			"angle = p·θ_i with p = pos[t] (÷factor for linear scaling); the pair (a,b) is (x[2i],x[2i+1]) for style " +
			"\"interleaved\" or (x[i],x[i+dims/2]) for \"half\"; a' = a·cos − b·sin, b' = a·sin + b·cos; elements from dims on are copied.",
	},
	{
		Name: "kv_write", Group: GroupModel, Effect: true,
		Args:  []Operand{{"k", ArgF32, false}, {"v", ArgF32, false}},
		Attrs: []AttrSpec{{"layer", AttrInt}},
		Shape: shapeKVWrite, Type: typeF32,
		Doc: "handle []: stores k[t] and v[t] ([Hkv,D] each) at position pos(t) of layer's float32 KV cache of sequence seq(t), for every t; " +
			"the result names that cache after the writes, for attention to read.",
	},
	{
		Name: "attention", Group: GroupModel,
		Args:  []Operand{{"q", ArgF32, false}, {"cache", ArgCache, false}},
		Attrs: []AttrSpec{{"scale", AttrFloat}, {"causal", AttrBool}},
		Opt:   []AttrSpec{{"softcap", AttrFloat}, {"window", AttrInt}},
		Shape: shapeAttention, Type: typeF32,
		Doc: "F32[T,H,D]: for head h of token t, with g = h / (H/Hkv) its KV head and j over the cached positions of seq(t) " +
			"(j ≤ pos(t) when causal; with window W > 0 also j > pos(t) − W, causal only): s_j = scale · q[t,h]·K[j,g], " +
			"then with softcap c > 0 s_j = c · tanh(s_j / c); w = softmax(s) (max-subtracted, sums in float64), out[t,h] = Σ_j w_j · V[j,g]. " +
			"softcap and window are optional; absent (or 0) they change nothing.",
	},
	{
		Name: "output", Group: GroupOutput, Effect: true,
		Args:  []Operand{{"logits", ArgF32, false}},
		Shape: shapeOutput, Type: typeF32,
		Doc: "F32[S,V]: the step's result, the logits after the last token of each sequence; exactly one, the last node.",
	},
	{
		Name: "hidden_out", Group: GroupOutput, Effect: true,
		Args:  []Operand{{"x", ArgF32, false}},
		Shape: shapeHiddenOut, Type: typeF32,
		Doc: "F32[T,E]: the result of a pipeline stage that is not the last: y = x, the residual stream after the stage's last layer " +
			"for every token of the step, the next stage's hidden_in; a graph has exactly one output-group node, the last.",
	},

	// --- mixture of experts (moe.go holds their rules) ---
	{
		Name: "topk", Group: GroupReduce,
		Args:  []Operand{{"x", ArgF32, false}},
		Attrs: []AttrSpec{{"k", AttrInt}},
		Shape: shapeTopK, Type: typeI32,
		Doc: "I32[T,k]: for x [T,N] and 0 < k ≤ N, y[t,:] are the indices of the k largest x[t,:] in descending order of value, " +
			"equal values in ascending order of index, a NaN counting as −∞ (a router's choice of experts).",
	},
	{
		Name: "moe_weights", Group: GroupModel,
		Args:  []Operand{{"logits", ArgF32, false}, {"ids", ArgI32, false}},
		Attrs: []AttrSpec{{"norm", AttrBool}},
		Shape: shapeMoEWeights, Type: typeF32,
		Doc: "F32[T,k]: the router weights of the chosen experts, for logits [T,N] and ids [T,k]: p = softmax(logits[t,:]) over all N " +
			"(max-subtracted, sums in float64), w[t,j] = p[ids[t,j]]; with norm, w[t,j] = p[ids[t,j]] / Σ_i p[ids[t,i]], which is a softmax " +
			"over the chosen experts' logits alone (top-k then softmax, Mixtral's order, is this with norm).",
	},
	{
		Name: "moe_matmul", Group: GroupModel, // not GroupMatmul: no norm prologue or add epilogue fuses into it
		Args:  []Operand{{"x", ArgF32, false}, {"w", ArgWeight, false}, {"ids", ArgI32, false}},
		Shape: shapeMoEMatmul, Type: typeF32,
		Doc: "F32[T,k,N]: the chosen experts' products, y[t,j,n] = Σ_c x_j[c] · W[ids[t,j],n,c]; W is an [E,N,K] weight (GGUF ne [K,N,E]: " +
			"E experts of N rows of K) of any dtype read row by row as stored, and only the chosen experts' rows are read; x_j = x[t,:] " +
			"for x [T,K] (every expert reads the token's row) or x[t,j,:] for x [T,k,K]; an id outside [0,E) is an error at run time.",
	},
	{
		Name: "moe_sum", Group: GroupModel,
		Args:  []Operand{{"x", ArgF32, false}, {"w", ArgF32, false}},
		Shape: shapeMoESum, Type: typeF32,
		Doc: "F32[T,N]: y[t,n] = Σ_j w[t,j] · x[t,j,n], j from 0 to k−1 in order, for x [T,k,N] and w [T,k]: the experts' outputs " +
			"weighted by the router.",
	},
}
