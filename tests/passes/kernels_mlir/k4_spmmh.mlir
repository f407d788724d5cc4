// K4 SpMMH (Hadamard): A[i,j] = B[i,j] * C[i,j]; B, C CSR; dense output; loop order i, j.
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32 }>
#trait = { indexing_maps = [affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>, affine_map<(i,j) -> (i,j)>],
  iterator_types = ["parallel", "parallel"] }
func.func @k4(%b: tensor<8x16xf64, #CSR>, %c: tensor<8x16xf64, #CSR>, %a: tensor<8x16xf64> {bufferization.writable = true}) -> tensor<8x16xf64> {
  %r = linalg.generic #trait ins(%b, %c : tensor<8x16xf64, #CSR>, tensor<8x16xf64, #CSR>) outs(%a : tensor<8x16xf64>) {
  ^bb0(%x: f64, %y: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    linalg.yield %m : f64
  } -> tensor<8x16xf64>
  return %r : tensor<8x16xf64>
}
